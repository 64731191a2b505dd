//! One process per SQLite file: an exclusive `flock` on `<file>.lock`, held for the
//! process's life and released by the kernel however it ends (`kill -9` included), so a
//! stale lock file never blocks a restart. Because of it, a `running` session in the file
//! can only be one an earlier process left: start-up marks it `interrupted` at once.
//! (SQLite's own exclusive locking mode would also shut out outside readers: backups,
//! `sqlite3` on the file.)

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The held lock (released when dropped or when the process ends).
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

/// Where the lock for the SQLite file `db` lives.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the lock of `db` without waiting, and writes this process's id into the lock
/// file for the message of the next process that tries. The error names the file and,
/// when it can be read, the holder's PID.
pub fn hold(db: &Path) -> Result<FileLock, String> {
    let path = lock_path(db);
    let mut open = OpenOptions::new();
    open.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    let mut file = open
        .open(&path)
        .map_err(|e| format!("cannot open the lock file {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            // Empty while the holder is between taking the lock and writing its PID.
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let holder = match text.trim().parse::<u32>() {
                Ok(pid) => format!("PID {pid}"),
                Err(_) => "PID unknown".to_string(),
            };
            return Err(format!(
                "the SQLite file {} is in use by another massgen process ({holder}, holding {}): one server per SQLite file; stop that one first, or share records between replicas through PostgreSQL",
                db.display(),
                path.display()
            ));
        }
        Err(std::fs::TryLockError::Error(e)) => {
            return Err(format!("cannot lock {}: {e}", path.display()));
        }
    }
    file.set_len(0)
        .and_then(|()| file.write_all(format!("{}\n", std::process::id()).as_bytes()))
        .map_err(|e| format!("cannot write the lock file {}: {e}", path.display()))?;
    Ok(FileLock { _file: file })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("records.db");
        let first = super::hold(&db).unwrap();
        let err = super::hold(&db).unwrap_err();
        assert!(err.contains(&db.display().to_string()), "{err}");
        assert!(
            err.contains(&format!("PID {}", std::process::id())),
            "{err}"
        );
        drop(first);
        super::hold(&db).unwrap();
    }
}
