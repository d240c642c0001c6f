//! Request guards: the `Host` check against DNS rebinding, the global
//! in-flight limit, the JSON content type, and reading a body within its
//! size limit and deadline.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use tokio::sync::OwnedSemaphorePermit;

use crate::AppState;
use crate::error::ApiError;

/// A held place among the requests in flight; a streamed response keeps a
/// clone until its stream ends.
#[derive(Clone)]
pub struct InFlightPermit(#[allow(dead_code)] pub Arc<OwnedSemaphorePermit>);

/// The host part of a `Host` value: lowercased, without the port, an IPv6
/// literal without its brackets.
fn host_name(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("").to_string();
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name.to_string(),
        _ => host,
    }
}

/// Whether a request naming `host` may be answered by a server bound to
/// `bound` with these extra allowed hosts. A loopback-bound server answers
/// only loopback names, its own address and the allowed hosts (a browser
/// page whose DNS name was rebound to 127.0.0.1 still sends its own name); a
/// server bound elsewhere checks only when hosts are listed.
pub fn host_allowed(host: &str, bound: Option<SocketAddr>, allowed: &[String]) -> bool {
    let name = host_name(host);
    let full = host.trim().to_ascii_lowercase();
    if allowed
        .iter()
        .any(|a| a.eq_ignore_ascii_case(&full) || host_name(a) == name)
    {
        return true;
    }
    let bound_loopback = bound.is_none_or(|b| b.ip().is_loopback());
    if !bound_loopback && allowed.is_empty() {
        return true;
    }
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) => ip.is_loopback() || bound.is_some_and(|b| b.ip() == ip),
        Err(_) => false,
    }
}

/// Refuses (403) requests whose `Host` is not allowed; `/health` stays open.
pub async fn check_host(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if req.uri().path() != "/health" {
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().to_string())
            .or_else(|| {
                req.headers()
                    .get(header::HOST)
                    .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
            });
        // No browser sends a request without a host, so its absence cannot
        // be a rebinding attack.
        if let Some(host) = host
            && !host_allowed(&host, s.bound.get().copied(), &s.cfg.allowed_hosts)
        {
            tracing::warn!("refused a request for host {host:?}");
            return ApiError::status(
                StatusCode::FORBIDDEN,
                format!(
                    "The host {host:?} is not served here; start the server with \
                     --allowed-host to allow it"
                ),
            )
            .code("host_not_allowed")
            .into_response();
        }
    }
    next.run(req).await
}

/// Answers 503 with `Retry-After` when `max_in_flight` POST requests are
/// already being handled.
pub async fn limit_in_flight(
    State(s): State<Arc<AppState>>,
    mut req: Request,
    next: Next,
) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    let Ok(permit) = s.in_flight.clone().try_acquire_owned() else {
        s.metrics.rejected.fetch_add(1, Relaxed);
        return ApiError::busy(format!(
            "The server is busy: {} requests are already in flight; retry later",
            s.cfg.max_in_flight
        ))
        .into_response();
    };
    req.extensions_mut()
        .insert(InFlightPermit(Arc::new(permit)));
    next.run(req).await
}

/// 415 unless the body is declared as `application/json` (parameters such
/// as `charset` allowed): a browser may send a cross-origin `text/plain` POST
/// without asking first, a JSON one it may not.
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct.split(';').next().unwrap_or("").trim();
    if mime.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    Err(ApiError::status(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        if ct.is_empty() {
            "The request has no Content-Type: send the JSON body with \
             `Content-Type: application/json`"
                .to_string()
        } else {
            format!(
                "The Content-Type {ct:?} is not accepted: send the JSON body with \
                 `Content-Type: application/json`"
            )
        },
    )
    .code("unsupported_media_type"))
}

fn too_large(limit: usize) -> ApiError {
    ApiError::status(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("The request body is larger than the limit of {limit} bytes"),
    )
    .code("request_too_large")
}

/// The whole body of a JSON request: checked for its content type, refused
/// past `max_body` bytes, and given `body_timeout` in all to arrive.
pub async fn json_body(s: &AppState, req: Request) -> Result<Bytes, ApiError> {
    require_json(req.headers())?;
    let limit = s.cfg.max_body;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let mut body: Body = req.into_body();
    let mut buf = Vec::with_capacity(declared.map_or(0, |n| n as usize));
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                ApiError::invalid(format!("The request body could not be read: {e}"))
            })?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > limit {
                    return Err(too_large(limit));
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(())
    };
    match tokio::time::timeout(s.cfg.body_timeout, read).await {
        Ok(r) => r?,
        Err(_) => {
            return Err(ApiError::status(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "The request body did not arrive within {} s",
                    s.cfg.body_timeout.as_secs_f64()
                ),
            )
            .code("request_timeout"));
        }
    }
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        let lo: Option<SocketAddr> = Some("127.0.0.1:8080".parse().unwrap());
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.5.6.7:1",
            "[::1]",
            "[::1]:8080",
            "app.localhost:3000",
        ] {
            assert!(host_allowed(ok, lo, &[]), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "10.0.0.1",
            "",
        ] {
            assert!(!host_allowed(bad, lo, &[]), "{bad}");
        }
        let allowed = vec!["my.box".to_string()];
        assert!(host_allowed("my.box:8080", lo, &allowed));
        assert!(host_allowed("MY.BOX", lo, &allowed));
        assert!(!host_allowed("evil.example", lo, &allowed));

        let any: Option<SocketAddr> = Some("0.0.0.0:8080".parse().unwrap());
        assert!(host_allowed("evil.example", any, &[]));
        assert!(!host_allowed("evil.example", any, &allowed));
        assert!(host_allowed("my.box", any, &allowed));
        let lan: Option<SocketAddr> = Some("192.168.1.5:8080".parse().unwrap());
        assert!(host_allowed("192.168.1.5:8080", lan, &allowed));
    }

    #[test]
    fn content_types() {
        let ct = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            require_json(&h)
        };
        assert!(ct("application/json").is_ok());
        assert!(ct("Application/JSON; charset=utf-8").is_ok());
        assert_eq!(ct("text/plain").unwrap_err().status.as_u16(), 415);
        assert_eq!(ct("application/jsonx").unwrap_err().status.as_u16(), 415);
        assert_eq!(
            ct("application/x-www-form-urlencoded")
                .unwrap_err()
                .status
                .as_u16(),
            415
        );
        assert_eq!(
            require_json(&HeaderMap::new()).unwrap_err().status.as_u16(),
            415
        );
    }
}
