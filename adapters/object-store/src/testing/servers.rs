//! Servers on loopback for tests and measurements: nginx and moto.

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections after it starts.
const STARTUP: Duration = Duration::from_secs(30);

/// A free port on 127.0.0.1 (bound and released: a server started right
/// after takes it).
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until `port` accepts connections, or `child` exits.
fn wait_ready(child: &mut Child, port: u16, what: &str, log: &Path) -> io::Result<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t = Instant::now();
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            let out = std::fs::read_to_string(log).unwrap_or_default();
            return Err(io::Error::other(format!(
                "{what} exited with {status} before it listened on port {port}: {}",
                out.trim()
            )));
        }
        if t.elapsed() > STARTUP {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what} did not listen on port {port} within {STARTUP:?}"),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills a child started in a process group of its own, and everything in
/// that group (nginx's workers, moto's threads), and reaps it.
fn kill_group(child: &mut Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill(2) with a negative pid signals the process group `pgid`,
    // which `spawn` created with this child as its leader (`process_group(0)`);
    // no memory is involved.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
    let _ = child.wait();
}

/// Finds `program` on `PATH` (or at one of `also`), or says which package
/// provides it.
fn find(program: &str, also: &[&str], package: &str) -> io::Result<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .chain(also.iter().map(PathBuf::from))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{program} not found on PATH: install {package}"),
            )
        })
}

/// nginx serving a directory over HTTP on a free loopback port, with range
/// requests (`sendfile`), no access log, and a switch that makes it answer
/// 503 to everything ([`set_unavailable`](Self::set_unavailable)). Killed
/// (with its workers) when dropped.
#[derive(Debug)]
pub struct Nginx {
    binary: PathBuf,
    root: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Nginx {
    /// Starts nginx serving `root`, its configuration and logs in a fresh
    /// directory under the system's temporary directory.
    ///
    /// # Errors
    ///
    /// nginx is not installed (`NotFound`, naming the Debian package), or
    /// did not start (its error log in the message).
    pub fn start(root: &Path) -> io::Result<Nginx> {
        let binary = find("nginx", &["/usr/sbin/nginx"], "the nginx package")?;
        let dir = std::env::temp_dir().join(format!(
            "pagestream-nginx-{}-{}",
            std::process::id(),
            free_port()?
        ));
        std::fs::create_dir_all(&dir)?;
        let mut n = Nginx {
            binary,
            root: root.canonicalize()?,
            dir,
            port: free_port()?,
            child: None,
        };
        n.spawn()?;
        Ok(n)
    }

    fn spawn(&mut self) -> io::Result<()> {
        let d = self.dir.display();
        // Workers run as root when the tests do: the served files need not
        // be readable by `nobody`.
        // SAFETY: geteuid(2) has no preconditions and touches no memory.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user root;"
        } else {
            ""
        };
        let conf = format!(
            "{user}
worker_processes 2;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    types {{ }}
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port} reuseport;
        root {root};
        location / {{
            if (-f {d}/unavailable) {{ return 503; }}
        }}
    }}
}}
",
            port = self.port,
            root = self.root.display(),
        );
        let conf_path = self.dir.join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let log = self.dir.join("stderr.log");
        let mut child = Command::new(&self.binary)
            .arg("-c")
            .arg(&conf_path)
            .arg("-p")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .process_group(0)
            .spawn()?;
        if let Err(e) = wait_ready(&mut child, self.port, "nginx", &self.dir.join("error.log")) {
            kill_group(&mut child);
            return Err(e);
        }
        self.child = Some(child);
        Ok(())
    }

    /// The URL of `relative` (a path under the served directory).
    pub fn url(&self, relative: &str) -> String {
        format!(
            "http://127.0.0.1:{}/{}",
            self.port,
            relative.trim_start_matches('/')
        )
    }

    /// The directory served.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Makes every request answer 503 (`true`) or be served again
    /// (`false`), without restarting.
    pub fn set_unavailable(&self, unavailable: bool) -> io::Result<()> {
        let flag = self.dir.join("unavailable");
        if unavailable {
            std::fs::write(flag, b"")
        } else {
            match std::fs::remove_file(flag) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                r => r,
            }
        }
    }

    /// Kills nginx and its workers at once (connections drop mid-transfer).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_group(&mut c);
        }
    }

    /// Starts nginx again on the same port, after [`kill`](Self::kill).
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// moto's S3-API server (`moto_server`, from PyPI: `pip install
/// 'moto[server]'`) on a free loopback port; it keeps objects in memory, so
/// a restart loses them. Killed when dropped.
#[derive(Debug)]
pub struct Moto {
    binary: PathBuf,
    port: u16,
    log: PathBuf,
    child: Option<Child>,
}

/// The region and credentials the tests use with moto (moto accepts any).
const MOTO_REGION: &str = "us-east-1";
const MOTO_KEY: &str = "pagestream";
const MOTO_SECRET: &str = "pagestream-secret";

impl Moto {
    /// Starts `moto_server`.
    ///
    /// # Errors
    ///
    /// moto is not installed (`NotFound`, naming the PyPI package), or did
    /// not start.
    pub fn start() -> io::Result<Moto> {
        let binary = find(
            "moto_server",
            &[],
            "moto's server: pip install 'moto[server]'",
        )?;
        let port = free_port()?;
        let mut m = Moto {
            binary,
            port,
            log: std::env::temp_dir()
                .join(format!("pagestream-moto-{}-{port}.log", std::process::id())),
            child: None,
        };
        m.spawn()?;
        Ok(m)
    }

    fn spawn(&mut self) -> io::Result<()> {
        let mut child = Command::new(&self.binary)
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&self.log)?)
            .process_group(0)
            .spawn()?;
        if let Err(e) = wait_ready(&mut child, self.port, "moto_server", &self.log) {
            kill_group(&mut child);
            return Err(e);
        }
        self.child = Some(child);
        Ok(())
    }

    /// The endpoint URL (`AWS_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The `AWS_*` environment that points object_store's S3 client (and
    /// so `s3://` URLs) at this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", MOTO_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", MOTO_SECRET.into()),
            ("AWS_REGION", MOTO_REGION.into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// An S3 store for `bucket` on this server (the bucket need not exist).
    pub fn store(&self, bucket: &str) -> io::Result<AmazonS3> {
        AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_access_key_id(MOTO_KEY)
            .with_secret_access_key(MOTO_SECRET)
            .with_region(MOTO_REGION)
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .build()
            .map_err(io::Error::other)
    }

    /// Creates `bucket` (moto's REST API: a `PUT` of the bucket's path).
    pub fn create_bucket(&self, bucket: &str) -> io::Result<()> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        use std::io::{Read, Write};
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        if answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200") {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "moto: creating bucket {bucket}: {}",
                answer.lines().next().unwrap_or("no answer")
            )))
        }
    }

    /// Uploads `bytes` as `key` in `bucket` (multipart for large objects).
    pub async fn put(&self, bucket: &str, key: &str, bytes: Vec<u8>) -> io::Result<()> {
        let store = self.store(bucket)?;
        store
            .put(&ObjectPath::from(key), PutPayload::from(bytes))
            .await
            .map(drop)
            .map_err(io::Error::other)
    }

    /// Kills the server (it forgets every bucket).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_group(&mut c);
        }
    }

    /// Starts it again on the same port, empty, after [`kill`](Self::kill).
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.spawn()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}
