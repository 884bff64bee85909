//! Raw loopback traffic for proxy tests: an HTTP origin that answers one
//! fixed text, and a `CONNECT` exchange read back as status and reason.

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Starts a loopback HTTP server answering every request with `200` and
/// `text`; its port.
pub async fn text_origin(text: &'static str) -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback listener");
    let port = listener.local_addr().expect("its address").port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = socket.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = socket.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

/// Sends `CONNECT authority` over `stream` with `headers` (each line ending
/// in CRLF); the answer's status, its body (a refusal's reason), and the
/// stream, a tunnel when the status is 200.
pub async fn send_connect<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    authority: &str,
    headers: &str,
) -> (u16, String, S) {
    let head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{headers}\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .expect("sending CONNECT");
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        stream
            .read_exact(&mut byte)
            .await
            .expect("the answer's head");
        seen.push(byte[0]);
    }
    let head = String::from_utf8(seen).expect("a UTF-8 head");
    let status = head
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .expect("a status line");
    let length = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })
        .map_or(0, |n| n.trim().parse().expect("a content length"));
    let mut body = vec![0u8; length];
    stream
        .read_exact(&mut body)
        .await
        .expect("the answer's body");
    (
        status,
        String::from_utf8(body).expect("a UTF-8 body"),
        stream,
    )
}
