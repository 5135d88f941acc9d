//! Who may talk to the server. A workbench on `127.0.0.1` is reachable by every web page the user
//! opens, so each request passes three checks before any handler runs (see SECURITY.md):
//!
//! 1. **Host** — on a loopback bind, the `Host` header must name a loopback host. A page on a
//!    hostile domain that re-resolves to 127.0.0.1 (DNS rebinding) sends its own name here.
//! 2. **Origin** — a request that carries `Origin` (every cross-site fetch, form post and
//!    WebSocket handshake from a browser does) must come from this server's own origin or one
//!    listed with `--allow-origin`. Clients that send no `Origin` (curl, Python) pass.
//! 3. **Token** — with `--token`, every route but `/health` needs it (`/ready` answers without
//!    it too, but then its 503 does not say why): `Authorization: Bearer T`,
//!    the `simtree_token` cookie, or `?token=T`. Opening the UI through the printed link
//!    (`/?token=T`) sets the cookie (HttpOnly, SameSite=Strict) and redirects to the clean URL,
//!    as Jupyter does, so the UI's own fetches and sockets carry it without knowing it.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};

use super::error::ApiError;

/// The cookie the UI link sets.
pub(crate) const TOKEN_COOKIE: &str = "simtree_token";

/// The access policy of one server.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// Required on every route but `/health` when set.
    pub(crate) token: Option<String>,
    /// Extra origins (`scheme://host[:port]`) allowed besides the server's own.
    pub(crate) allowed_origins: Vec<String>,
    /// Require a loopback `Host` (set when the server is bound to a loopback address).
    pub(crate) loopback_host_only: bool,
    /// Origins (`scheme://host[:port]`) whose pages may show the web UI in a frame
    /// (`--allow-framing`); by default none may.
    pub(crate) framing_origins: Vec<String>,
}

impl Access {
    /// The headers every web UI answer carries against clickjacking: `Content-Security-Policy:
    /// frame-ancestors 'none'` and `X-Frame-Options: DENY` by default; with `--allow-framing`,
    /// `frame-ancestors` lists those origins and `X-Frame-Options` (which cannot name several
    /// origins) is left out, since browsers that know the policy obey it instead.
    pub(crate) fn frame_headers(&self) -> Vec<(header::HeaderName, HeaderValue)> {
        let ancestors =
            if self.framing_origins.is_empty() { "'none'".to_string() } else { self.framing_origins.join(" ") };
        let csp = HeaderValue::from_str(&format!("frame-ancestors {ancestors}"))
            .unwrap_or(HeaderValue::from_static("frame-ancestors 'none'"));
        let mut headers = vec![(header::CONTENT_SECURITY_POLICY, csp)];
        if self.framing_origins.is_empty() {
            headers.push((header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")));
        }
        headers
    }

    /// A CORS layer answering preflights of the listed origins only; `None` when none is listed
    /// (then no cross-origin response ever carries `Access-Control-Allow-Origin`).
    pub(crate) fn cors(&self) -> Option<CorsLayer> {
        let origins: Vec<HeaderValue> =
            self.allowed_origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
        if origins.is_empty() {
            return None;
        }
        Some(
            CorsLayer::new()
                .allow_origin(AllowOrigin::list(origins))
                .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::PATCH])
                .allow_headers([header::CONTENT_TYPE, header::AUTHORIZATION])
                .allow_credentials(true),
        )
    }

    fn origin_allowed(&self, origin: &str, host: Option<&str>) -> bool {
        let same = host.is_some_and(|h| {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|rest| rest.eq_ignore_ascii_case(h))
        });
        same || self.allowed_origins.iter().any(|o| o.trim_end_matches('/').eq_ignore_ascii_case(origin))
    }

    fn host_allowed(&self, host: &str) -> bool {
        if !self.loopback_host_only {
            return true;
        }
        let name = host_name(host);
        is_loopback_name(name)
            || self.allowed_origins.iter().any(|o| {
                let rest = o.split("://").nth(1).unwrap_or(o);
                host_name(rest.trim_end_matches('/')).eq_ignore_ascii_case(name)
            })
    }

    fn token_ok(&self, headers: &HeaderMap, uri: &Uri) -> TokenCheck {
        let Some(token) = &self.token else {
            return TokenCheck::Ok;
        };
        let bearer =
            headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
        if bearer.is_some_and(|b| same(b.trim(), token))
            || cookie(headers, TOKEN_COOKIE).is_some_and(|c| same(c, token))
        {
            return TokenCheck::Ok;
        }
        match query_param(uri, "token") {
            Some(q) if same(&q, token) => TokenCheck::InQuery,
            _ => TokenCheck::Missing,
        }
    }
}

enum TokenCheck {
    Ok,
    /// Valid, given as `?token=`: sockets use it as is; a page load trades it for the cookie.
    InQuery,
    Missing,
}

/// The host part of `host[:port]` (IPv6 literals keep their brackets).
fn host_name(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split(']').next().map_or(host, |h| &host[..h.len() + 1]);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

fn is_loopback_name(name: &str) -> bool {
    let name = name.trim_end_matches('.');
    name.eq_ignore_ascii_case("localhost")
        || name.to_ascii_lowercase().ends_with(".localhost")
        || name == "[::1]"
        || name.parse::<std::net::Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// Compares secrets in time independent of where they differ.
fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn query_param(uri: &Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The URI without its `token` parameter (where the cookie-setting redirect goes).
fn without_token(uri: &Uri) -> String {
    let rest: Vec<&str> =
        uri.query().unwrap_or("").split('&').filter(|kv| !kv.is_empty() && !kv.starts_with("token=")).collect();
    if rest.is_empty() { uri.path().to_string() } else { format!("{}?{}", uri.path(), rest.join("&")) }
}

fn refuse(status: StatusCode, detail: String) -> Response {
    ApiError::new(status, detail).into_response()
}

/// The middleware: host, origin, then token (see the module docs).
pub(crate) async fn guard(State(access): State<Arc<Access>>, req: Request, next: Next) -> Response {
    if req.uri().path() == "/health" {
        return next.run(req).await;
    }
    let headers = req.headers();
    // One `Host`, readable: with two, a proxy and this check could each read a different one.
    let mut hosts = headers.get_all(header::HOST).iter();
    let (host, second) = (hosts.next(), hosts.next());
    if second.is_some() {
        return refuse(StatusCode::BAD_REQUEST, "more than one Host header".into());
    }
    let host = match host.map(|v| v.to_str()) {
        Some(Err(_)) => return refuse(StatusCode::BAD_REQUEST, "the Host header is not ASCII text".into()),
        Some(Ok(h)) => Some(h),
        None => None,
    };
    if let Some(h) = host
        && !access.host_allowed(h)
    {
        return refuse(
            StatusCode::FORBIDDEN,
            format!("host '{h}' is not served here: this server answers on loopback names only"),
        );
    }
    let origin = headers.get(header::ORIGIN).map(|v| v.to_str().unwrap_or("(invalid)"));
    if let Some(o) = origin
        && !access.origin_allowed(o, host)
    {
        return refuse(
            StatusCode::FORBIDDEN,
            format!("cross-origin request from '{o}' refused; start the server with --allow-origin {o} to allow it"),
        );
    }
    // A preflight of an allowed origin carries no credentials; the CORS layer answers it.
    if req.method() == Method::OPTIONS && origin.is_some() {
        return next.run(req).await;
    }
    match access.token_ok(headers, req.uri()) {
        TokenCheck::Ok => next.run(req).await,
        TokenCheck::InQuery => {
            let is_page = req.method() == Method::GET
                && !req.headers().contains_key(header::UPGRADE)
                && !req.uri().path().starts_with("/devui/")
                && !req.uri().path().starts_with("/api/");
            if !is_page {
                return next.run(req).await;
            }
            let token = access.token.as_deref().unwrap_or_default();
            let cookie = format!("{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict");
            Response::builder()
                .status(StatusCode::SEE_OTHER)
                .header(header::LOCATION, without_token(req.uri()))
                .header(header::SET_COOKIE, cookie)
                .body(Body::empty())
                .unwrap_or_else(|_| StatusCode::SEE_OTHER.into_response())
        }
        // Readiness probes cannot send the token: they get the answer's status, not its cause.
        TokenCheck::Missing if req.uri().path() == "/ready" => {
            let res = next.run(req).await;
            if res.status().is_success() {
                res
            } else {
                refuse(res.status(), "not ready (send the access token to see why)".into())
            }
        }
        TokenCheck::Missing => refuse(
            StatusCode::UNAUTHORIZED,
            "this server needs its access token: open the link it printed at start-up, or send \
             'Authorization: Bearer <token>'"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_rebinding() {
        let a = Access { loopback_host_only: true, ..Access::default() };
        for ok in ["127.0.0.1:8090", "localhost:1", "[::1]:80", "LOCALHOST", "app.localhost:3"] {
            assert!(a.host_allowed(ok), "{ok}");
        }
        for bad in ["evil.example:8090", "127.0.0.1.evil.example", "10.0.0.1:80"] {
            assert!(!a.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn origins_are_same_origin_or_listed() {
        let a = Access { allowed_origins: vec!["http://localhost:5173".into()], ..Access::default() };
        assert!(a.origin_allowed("http://127.0.0.1:8090", Some("127.0.0.1:8090")));
        assert!(a.origin_allowed("http://localhost:5173", Some("127.0.0.1:8090")));
        assert!(!a.origin_allowed("http://evil.example", Some("127.0.0.1:8090")));
        assert!(!a.origin_allowed("null", Some("127.0.0.1:8090")));
        assert!(!a.origin_allowed("http://127.0.0.1:8091", Some("127.0.0.1:8090")));
    }

    #[test]
    fn the_ui_refuses_frames_unless_origins_are_named() {
        let text = |a: &Access| -> Vec<(String, String)> {
            a.frame_headers().into_iter().map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string())).collect()
        };
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            text(&Access::default()),
            [pair("content-security-policy", "frame-ancestors 'none'"), pair("x-frame-options", "DENY")]
        );
        let a = Access {
            framing_origins: vec!["http://localhost:8888".into(), "https://hub.example".into()],
            ..Access::default()
        };
        assert_eq!(
            text(&a),
            [pair("content-security-policy", "frame-ancestors http://localhost:8888 https://hub.example")]
        );
    }

    #[test]
    fn token_from_header_cookie_or_query() {
        let a = Access { token: Some("s3cret-token".into()), ..Access::default() };
        let uri: Uri = "/devui/simtree?x=1&token=s3cret-token".parse().unwrap();
        assert!(matches!(a.token_ok(&HeaderMap::new(), &uri), TokenCheck::InQuery));
        assert_eq!(without_token(&uri), "/devui/simtree?x=1");
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, "a=b; simtree_token=s3cret-token".parse().unwrap());
        assert!(matches!(a.token_ok(&h, &"/".parse().unwrap()), TokenCheck::Ok));
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, "Bearer wrong".parse().unwrap());
        assert!(matches!(a.token_ok(&h, &"/".parse().unwrap()), TokenCheck::Missing));
        assert_eq!(percent_decode("a%2Bb+c%zz"), "a+b c%zz");
    }

    #[tokio::test]
    async fn ready_answers_probes_without_the_token_but_keeps_its_cause() {
        use tower::Service;
        let access = Arc::new(Access { token: Some("s3cret-token".into()), ..Access::default() });
        let mut app = axum::Router::new()
            .route(
                "/ready",
                axum::routing::get(|| async {
                    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "postgresql: db.internal:5432 refused")
                }),
            )
            .route("/x", axum::routing::get(|| async { "x" }))
            .layer(axum::middleware::from_fn_with_state(access, guard));
        let mut get = async |path: &str, bearer: bool| {
            let mut req = Request::builder().uri(path);
            if bearer {
                req = req.header(header::AUTHORIZATION, "Bearer s3cret-token");
            }
            let res = app.call(req.body(Body::empty()).unwrap()).await.unwrap();
            let status = res.status();
            let body = axum::body::to_bytes(res.into_body(), 1 << 16).await.unwrap();
            (status, String::from_utf8_lossy(&body).into_owned())
        };
        let (status, body) = get("/ready", false).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("not ready") && !body.contains("db.internal"), "{body}");
        let (status, body) = get("/ready", true).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("db.internal"), "{body}");
        assert_eq!(get("/x", false).await.0, StatusCode::UNAUTHORIZED);
        assert_eq!(get("/x", true).await.0, StatusCode::OK);
    }
}
