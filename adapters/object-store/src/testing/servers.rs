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
    // A leader already reaped no longer holds its group id, which may now
    // be another group's.
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
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

/// Creates (`on`) or removes the flag file `path` the nginx configuration
/// tests for.
fn flag(path: &Path, on: bool) -> io::Result<()> {
    if on {
        std::fs::write(path, b"")
    } else {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r,
        }
    }
}

/// Bytes per second nginx sends each response at while
/// [`set_slow`](Nginx::set_slow) is on.
pub const SLOW_RATE: u64 = 32 << 10;

/// nginx serving a directory over HTTP on a free loopback port, with range
/// requests (`sendfile`), no access log, and switches that make it answer
/// 503 to everything ([`set_unavailable`](Self::set_unavailable)) or send
/// slowly ([`set_slow`](Self::set_slow)). Killed (with its workers) when
/// dropped.
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
            if (-f {d}/slow) {{ set $limit_rate {slow}; }}
        }}
    }}
}}
",
            port = self.port,
            root = self.root.display(),
            slow = SLOW_RATE,
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
        flag(&self.dir.join("unavailable"), unavailable)
    }

    /// Makes every response begun from now on be sent at [`SLOW_RATE`]
    /// bytes per second (`true`; a GET of 128 KiB then takes 4 s, long
    /// enough to be cut off by a [`kill`](Self::kill)), or at full speed
    /// again (`false`). Kept across a restart.
    pub fn set_slow(&self, slow: bool) -> io::Result<()> {
        flag(&self.dir.join("slow"), slow)
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
    /// The credentials [`store`](Moto::store), [`env`](Moto::env) and
    /// [`put`](Moto::put) use: any until [`require_auth`](Moto::require_auth),
    /// then those of the user it made.
    key: String,
    secret: String,
}

/// The region and credentials the tests use with moto (moto accepts any
/// until it is told to check them).
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
            key: MOTO_KEY.into(),
            secret: MOTO_SECRET.into(),
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
            ("AWS_ACCESS_KEY_ID", self.key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", MOTO_REGION.into()),
            ("AWS_ALLOW_HTTP", "true".into()),
        ]
    }

    /// An S3 store for `bucket` on this server (the bucket need not exist).
    pub fn store(&self, bucket: &str) -> io::Result<AmazonS3> {
        self.store_with_credentials(bucket, &self.key, &self.secret)
    }

    /// An S3 store for `bucket` on this server that signs its requests
    /// with `key` and `secret` (wrong ones, say, after
    /// [`require_auth`](Self::require_auth)).
    pub fn store_with_credentials(
        &self,
        bucket: &str,
        key: &str,
        secret: &str,
    ) -> io::Result<AmazonS3> {
        AmazonS3Builder::new()
            .with_endpoint(self.endpoint())
            .with_access_key_id(key)
            .with_secret_access_key(secret)
            .with_region(MOTO_REGION)
            .with_allow_http(true)
            .with_bucket_name(bucket)
            .build()
            .map_err(io::Error::other)
    }

    /// One HTTP/1.1 request to the server, unsigned (moto takes unsigned
    /// requests until [`require_auth`](Self::require_auth)); returns the
    /// status line and the body.
    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<(String, String)> {
        use std::io::{Read, Write};
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(STARTUP))?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.port,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes())?;
        s.write_all(body)?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)?;
        let status = answer.lines().next().unwrap_or("no answer").to_owned();
        let body = answer
            .split_once("\r\n\r\n")
            .map_or("", |(_, b)| b)
            .to_owned();
        Ok((status, body))
    }

    /// Creates `bucket` (moto's REST API: a `PUT` of the bucket's path,
    /// unsigned, so before [`require_auth`](Self::require_auth)).
    pub fn create_bucket(&self, bucket: &str) -> io::Result<()> {
        let (status, _) = self.request("PUT", &format!("/{bucket}"), &[], b"")?;
        if status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200") {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "moto: creating bucket {bucket}: {status}"
            )))
        }
    }

    /// An IAM query-API call (unsigned: routed to IAM by the credential
    /// scope of a dummy `Authorization` header), returning the body.
    fn iam(&self, params: &[(&str, &str)]) -> io::Result<String> {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("Version", "2010-05-08");
        for (k, v) in params {
            form.append_pair(k, v);
        }
        let body = form.finish();
        let (status, answer) = self.request(
            "POST",
            "/",
            &[
                (
                    "Authorization",
                    "AWS4-HMAC-SHA256 Credential=setup/20260101/us-east-1/iam/aws4_request, \
                     SignedHeaders=host, Signature=0",
                ),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            body.as_bytes(),
        )?;
        if status.contains(" 200 ") {
            Ok(answer)
        } else {
            Err(io::Error::other(format!(
                "moto: IAM {params:?}: {status}: {answer}"
            )))
        }
    }

    /// Makes the server check every request's credentials and signature
    /// from now on, as S3 does (moto accepts any by default): creates an
    /// IAM user allowed every S3 action, with an access key, which this
    /// handle's [`store`](Self::store), [`env`](Self::env) and
    /// [`put`](Self::put) then use, and turns moto's authentication on
    /// (`POST /moto-api/reset-auth` with 0 requests left unchecked).
    /// Returns the key and secret. A [`restart`](Self::restart) turns it
    /// off again.
    pub fn require_auth(&mut self) -> io::Result<(String, String)> {
        let user = "pagestream";
        self.iam(&[("Action", "CreateUser"), ("UserName", user)])?;
        let policy = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"s3:*","Resource":"*"}]}"#;
        self.iam(&[
            ("Action", "PutUserPolicy"),
            ("UserName", user),
            ("PolicyName", "s3"),
            ("PolicyDocument", policy),
        ])?;
        let answer = self.iam(&[("Action", "CreateAccessKey"), ("UserName", user)])?;
        let field = |name: &str| {
            let open = format!("<{name}>");
            let close = format!("</{name}>");
            answer
                .split_once(&open)
                .and_then(|(_, rest)| rest.split_once(&close))
                .map(|(v, _)| v.to_owned())
                .ok_or_else(|| {
                    io::Error::other(format!("moto: CreateAccessKey: no {name} in {answer}"))
                })
        };
        let (key, secret) = (field("AccessKeyId")?, field("SecretAccessKey")?);
        let (status, answer) = self.request(
            "POST",
            "/moto-api/reset-auth",
            &[("Content-Type", "text/plain")],
            b"0",
        )?;
        if !status.contains(" 200 ") {
            return Err(io::Error::other(format!(
                "moto: turning authentication on: {status}: {answer}"
            )));
        }
        self.key.clone_from(&key);
        self.secret.clone_from(&secret);
        Ok((key, secret))
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

    /// Starts it again on the same port, empty and accepting any
    /// credentials, after [`kill`](Self::kill).
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.key = MOTO_KEY.into();
        self.secret = MOTO_SECRET.into();
        self.spawn()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}
