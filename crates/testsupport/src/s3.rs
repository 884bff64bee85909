//! A real S3-compatible server (`s3s-fs`, installed by `make test-deps`)
//! started on a free loopback port with a private data directory. It verifies
//! SigV4 signatures, including the expiry of presigned URLs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::http::free_port;

/// Access key the server is started with.
pub const ACCESS_KEY: &str = "toolserver-test";
/// Secret key the server is started with.
pub const SECRET_KEY: &str = "toolserver-test-secret";

/// A running `s3s-fs`; killed when dropped.
pub struct S3Server {
    child: Child,
    addr: SocketAddr,
    _root: tempfile::TempDir,
}

impl S3Server {
    /// Starts a server with an empty bucket named `bucket`.
    ///
    /// # Panics
    /// When the binary cannot be found or started: tests cannot run without it.
    pub fn start(bucket: &str) -> Self {
        let root = tempfile::tempdir().expect("temp dir for s3s-fs");
        std::fs::create_dir(root.path().join(bucket)).expect("bucket dir");
        let port = free_port();
        let child = Command::new(binary())
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start s3s-fs (run `make test-deps`)");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_until_listening(addr);
        Self {
            child,
            addr,
            _root: root,
        }
    }

    /// The endpoint URL, e.g. `http://127.0.0.1:40123`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("S3S_FS_BIN") {
        return PathBuf::from(path);
    }
    let cached = std::env::var_os("HOME")
        .map(|home| PathBuf::from(home).join(".cache/toolserver/bin/s3s-fs"));
    match cached {
        Some(path) if path.exists() => path,
        _ => PathBuf::from("s3s-fs"),
    }
}

fn wait_until_listening(addr: SocketAddr) {
    let started = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "s3s-fs did not start listening on {addr}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
