//! A small Chrome DevTools Protocol client for the dashboard's browser test: headless
//! Chromium (Debian's `chromium`), driven over its websocket. Waits poll `Runtime.evaluate`
//! until a deadline; nothing waits on a fixed sleep alone.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

pub(crate) struct Browser {
    child: Child,
    socket: tungstenite::WebSocket<tungstenite::stream::MaybeTlsStream<TcpStream>>,
    next_id: u64,
    _profile: tempfile::TempDir,
}

/// The Chromium binary, when this machine has one.
pub(crate) fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(str::to_string)
}

impl Browser {
    pub(crate) fn launch(binary: &str) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(binary)
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--hide-scrollbars",
                "--window-size=1400,900",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium starts");
        // "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/<id>" on stderr.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(at) = line.find("ws://") {
                    let _ = tx.send(line[at..].trim().to_string());
                }
            }
        });
        let browser_ws = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("chromium prints its DevTools address");
        let port = browser_ws
            .trim_start_matches("ws://127.0.0.1:")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        let page_ws = page_target(&port);
        let (socket, _) = tungstenite::connect(page_ws.as_str()).expect("the page's websocket");
        // No CDP answer takes a minute: fail instead of hanging.
        if let tungstenite::stream::MaybeTlsStream::Plain(tcp) = socket.get_ref() {
            tcp.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        }
        let mut browser = Browser {
            child,
            socket,
            next_id: 0,
            _profile: profile,
        };
        browser.call("Page.enable", json!({}));
        browser.call("Runtime.enable", json!({}));
        browser
    }

    /// One CDP command; its `result` (events in between are skipped).
    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method});
        message["params"] = params;
        let message = message.to_string();
        self.socket
            .send(tungstenite::Message::text(message))
            .expect("send a CDP command");
        loop {
            // A signal (the test harness's, a child's exit) may interrupt the read: retry.
            let message = match self.socket.read() {
                Err(tungstenite::Error::Io(error))
                    if error.kind() == std::io::ErrorKind::Interrupted =>
                {
                    continue;
                }
                other => other.expect("read a CDP message"),
            };
            let tungstenite::Message::Text(text) = message else {
                continue;
            };
            let value: Value = serde_json::from_str(text.as_str()).unwrap();
            if value["id"] == json!(id) {
                assert!(value.get("error").is_none(), "{method} failed: {value}");
                return value["result"].clone();
            }
        }
    }

    pub(crate) fn navigate(&mut self, url: &str) {
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for("document.readyState === 'complete'", "the page loads");
    }

    /// The value of a JavaScript expression in the page.
    pub(crate) fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        result["result"]["value"].clone()
    }

    /// Polls `expression` until it is true; panics with `what` and the page's text after
    /// 30 s.
    pub(crate) fn wait_for(&mut self, expression: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.eval(&format!("Boolean({expression})")) == json!(true) {
                return;
            }
            if Instant::now() > deadline {
                let text = self.eval("document.body ? document.body.innerText : ''");
                panic!("timed out waiting until {what} ({expression}); the page says:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the viewport, written to `path`.
    pub(crate) fn screenshot(&mut self, path: &Path) {
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": false}),
        );
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("base64 PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The websocket address of the browser's first page (`/json/list`).
fn page_target(port: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut stream = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        // The DevTools server may keep the connection open: read until the body parses.
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        write!(
            stream,
            "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut bytes = Vec::new();
        let mut buffer = [0u8; 8192];
        let mut text = String::new();
        let mut targets = None;
        while let Ok(read) = stream.read(&mut buffer) {
            if read == 0 {
                break;
            }
            bytes.extend_from_slice(&buffer[..read]);
            text = String::from_utf8_lossy(&bytes).into_owned();
            let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
            if let Ok(Value::Array(list)) = serde_json::from_str::<Value>(body) {
                targets = Some(list);
                break;
            }
        }
        if let Some(targets) = targets
            && let Some(page) = targets.iter().find(|t| t["type"] == "page")
        {
            return page["webSocketDebuggerUrl"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no page target: {text}");
        std::thread::sleep(Duration::from_millis(100));
    }
}
