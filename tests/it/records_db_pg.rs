//! Session records on PostgreSQL, on the real binary: a throwaway PostgreSQL server per
//! test ([`PgServer`], Debian's package; the tests skip with a line when it is not
//! installed, and fail instead under MASSGEN_REQUIRE_POSTGRES=1, which `.ci/run` sets).

use std::time::{Duration, Instant};

use crate::support::postgres::PgServer;

/// True while a process with this PID exists (a reaped child's PID is gone).
fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn refuses_connections(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err()
}

/// The test helper itself: started, queried, stopped, started again on the same data and
/// port, stopped; nothing left running and the folder removed.
#[test]
fn throwaway_postgres_starts_stops_and_restarts() {
    let Some(mut pg) = PgServer::start() else {
        return;
    };
    assert_eq!(pg.query("select 1").trim(), "1");
    assert!(
        pg.url()
            .starts_with(&format!("postgres://postgres@127.0.0.1:{}/", pg.port())),
        "{}",
        pg.url()
    );
    pg.query("create table kept (v int); insert into kept values (42)");
    let first = pg.pid().expect("running");
    pg.stop();
    assert!(!alive(first), "postmaster {first} still there after stop");
    assert!(refuses_connections(pg.port()));

    pg.start_again();
    let second = pg.pid().expect("running again");
    assert_eq!(pg.query("select v from kept").trim(), "42", "same data");
    pg.stop();
    assert!(!alive(second), "postmaster {second} still there after stop");
    assert!(refuses_connections(pg.port()));

    pg.start_again();
    let third = pg.pid().expect("running a third time");
    let dir = pg.dir().to_path_buf();
    drop(pg);
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(third) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(third), "postmaster {third} still there after drop");
    assert!(!dir.exists(), "{} not removed", dir.display());
}
