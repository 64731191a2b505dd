//! nginx as a reverse proxy of the simulator: the floor a pass-through server is measured
//! against (it only copies bytes). One process in the foreground (`daemon off`,
//! `master_process off`: the process that serves is the one whose CPU is read, and killing
//! it leaves no worker behind), its config, pid file, logs and temp files in a directory of
//! the run. Responses are streamed as they come (`proxy_buffering off`) over kept-alive
//! upstream connections (HTTP/1.1, `Connection: ""`, an `upstream` block with `keepalive`).

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use super::server::pinned;

pub struct Nginx {
    child: Child,
    pub addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The config: `listen` on `port`, everything proxied to `upstream`. No request limit per
/// connection on either side (nginx closes a keep-alive connection after 1,000 requests by
/// default: reconnections the other targets do not have).
pub fn config(dir: &Path, port: u16, upstream: SocketAddr) -> String {
    let d = dir.display();
    format!(
        "daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{
    worker_connections 4096;
}}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    upstream simulator {{
        server {upstream};
        keepalive 256;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://simulator;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_buffering off;
        }}
    }}
}}
"
    )
}

impl Nginx {
    /// Starts `nginx` (pinned to `cpus`) in `dir` in front of `upstream`, and waits until
    /// it accepts connections.
    pub fn start(
        nginx: &Path,
        dir: &Path,
        upstream: SocketAddr,
        cpus: Option<&str>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        // A free port: nginx takes the port from its config, not from the kernel.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(dir, port, upstream))
            .map_err(|e| format!("{}: {e}", conf.display()))?;
        let log = dir.join("stderr.log");
        let stderr = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = pinned(nginx, cpus);
        cmd.arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            // Before the config is read nginx opens its built-in error log (/var/log/nginx).
            .arg("-e")
            .arg(dir.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr));
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", nginx.display()))?;
        let mut me = Self {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = me.child.try_wait() {
                let said = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!("nginx exited ({status}): {said}"));
            }
            if TcpStream::connect_timeout(&me.addr, Duration::from_millis(200)).is_ok() {
                return Ok(me);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = me.child.kill();
        Err(format!("nginx did not listen on {} within 10 s", me.addr))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}
