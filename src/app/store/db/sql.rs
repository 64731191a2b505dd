//! What every domain's statements share: integers as the database holds them, multi-row
//! statements in a few shapes, and placeholders for the engine at hand.

use super::Engine;

/// Database integers are signed; our times and counts are not.
pub fn to_db(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub fn from_db(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// `items` in chunks whose lengths are powers of two, at most `max` (a power of two): a
/// multi-row statement then has one of a few shapes (8 for 128), which the connection's
/// statement cache keeps prepared. A chunk of every length would prepare a new statement
/// most batches and push the cache's other statements out.
pub fn shaped_chunks<T>(items: &[T], max: usize) -> impl Iterator<Item = &[T]> {
    let mut rest = items;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let fits = rest.len().min(max);
        // The largest power of two not above `fits` (≥ 1, as `fits` ≥ 1).
        let size = 1usize << (usize::BITS - 1 - fits.leading_zeros());
        let (chunk, after) = rest.split_at(size);
        rest = after;
        Some(chunk)
    })
}

/// One parameter: `$n` for PostgreSQL; SQLite's anonymous `?`, because sqlx binds a
/// numbered SQLite parameter by asking SQLite for its name, a scan of the statement's
/// names: quadratic in the parameters (measured: at 800 parameters a third of the writer
/// thread's CPU went to that lookup).
pub fn parameter(sql: &mut String, engine: Engine, n: usize) {
    match engine {
        Engine::Postgres => {
            sql.push('$');
            sql.push_str(&n.to_string());
        }
        Engine::Sqlite => sql.push('?'),
    }
}

/// `($1, $2, …), ($n+1, …)`: `rows` groups of `columns` parameters.
pub fn placeholders(engine: Engine, rows: usize, columns: usize) -> String {
    let mut sql = String::with_capacity(rows * columns * 5);
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            parameter(&mut sql, engine, row * columns + column + 1);
        }
        sql.push(')');
    }
    sql
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunks_take_a_few_shapes_and_cover_every_item() {
        let items: Vec<usize> = (0..300).collect();
        let sizes: Vec<usize> = super::shaped_chunks(&items, 128).map(<[_]>::len).collect();
        assert_eq!(sizes, [128, 128, 32, 8, 4]);
        let joined: Vec<usize> = super::shaped_chunks(&items, 128)
            .flatten()
            .copied()
            .collect();
        assert_eq!(joined, items);
        assert_eq!(super::shaped_chunks(&items[..0], 128).count(), 0);
        let one: Vec<usize> = super::shaped_chunks(&items[..1], 128)
            .map(<[_]>::len)
            .collect();
        assert_eq!(one, [1]);
    }

    #[test]
    fn placeholders_number_every_row() {
        use super::Engine::{Postgres, Sqlite};
        assert_eq!(
            super::placeholders(Postgres, 2, 3),
            "($1, $2, $3), ($4, $5, $6)"
        );
        assert_eq!(super::placeholders(Sqlite, 2, 2), "(?, ?), (?, ?)");
        assert_eq!(super::placeholders(Postgres, 1, 1), "($1)");
    }
}
