//! Talking to the server from the browser: JSON over `fetch`, and WebSockets that send the
//! `ready` handshake on open. Failures come back as [`ApiError`]: the server's `detail` text for
//! an HTTP error, or `Offline` when the server cannot be reached at all (the shell shows a banner
//! for that instead of a browser exception).

use serde::de::DeserializeOwned;
use serde_json::Value;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{MessageEvent, Request, RequestInit, Response, WebSocket};

/// Why a request failed, in words for the person using the UI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiError {
    /// The server did not answer (stopped, network down).
    Offline,
    /// 404: the tree or node does not exist (any more).
    NotFound(String),
    /// Any other HTTP error: status and the server's `detail`.
    Http(u16, String),
    /// The browser refused the request or the answer was not what the UI expects.
    Client(String),
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApiError::Offline => write!(f, "The server is not reachable."),
            ApiError::NotFound(d) => write!(f, "Not found: {d}"),
            ApiError::Http(status, d) => write!(f, "{d} ({status})"),
            ApiError::Client(d) => write!(f, "{d}"),
        }
    }
}

impl From<ApiError> for String {
    fn from(e: ApiError) -> String {
        e.to_string()
    }
}

/// A JS exception's message only (its `Debug` form is a wasm stack trace nobody should read).
fn js_err(e: JsValue) -> ApiError {
    let text = e
        .as_string()
        .or_else(|| e.dyn_ref::<js_sys::Error>().map(|err| String::from(err.message())))
        .unwrap_or_else(|| "the browser refused the request".into());
    ApiError::Client(text)
}

async fn send(method: &str, path: &str, body: Option<&Value>) -> Result<String, ApiError> {
    let init = RequestInit::new();
    init.set_method(method);
    if let Some(b) = body {
        init.set_body(&JsValue::from_str(&b.to_string()));
    }
    let req = Request::new_with_str_and_init(path, &init).map_err(js_err)?;
    if body.is_some() {
        req.headers().set("content-type", "application/json").map_err(js_err)?;
    }
    let window = web_sys::window().ok_or(ApiError::Client("no window".into()))?;
    // fetch rejects (a TypeError) only when no answer came: the server is down.
    let resp: Response = JsFuture::from(window.fetch_with_request(&req))
        .await
        .map_err(|_| ApiError::Offline)?
        .unchecked_into();
    let text = JsFuture::from(resp.text().map_err(js_err)?)
        .await
        .map_err(|_| ApiError::Offline)?
        .as_string()
        .unwrap_or_default();
    if resp.ok() {
        return Ok(text);
    }
    let detail = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["detail"].as_str().map(str::to_string))
        .unwrap_or(text);
    Err(match resp.status() {
        404 => ApiError::NotFound(detail),
        // A proxy in front of a stopped server answers 502/503/504.
        502..=504 => ApiError::Offline,
        status => ApiError::Http(status, detail),
    })
}

fn parse<T: DeserializeOwned>(text: &str) -> Result<T, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::Client(format!("unexpected response: {e}")))
}

pub async fn get<T: DeserializeOwned>(path: &str) -> Result<T, ApiError> {
    parse(&send("GET", path, None).await?)
}

pub async fn post<T: DeserializeOwned>(path: &str, body: &Value) -> Result<T, ApiError> {
    parse(&send("POST", path, Some(body)).await?)
}

pub async fn delete(path: &str) -> Result<(), ApiError> {
    send("DELETE", path, None).await.map(|_| ())
}

/// Waits `ms` milliseconds.
pub async fn sleep(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// An open WebSocket; closed when dropped (without calling its close callback).
pub struct Socket {
    ws: WebSocket,
    _on_open: Closure<dyn FnMut()>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
    _on_close: Closure<dyn FnMut()>,
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.ws.set_onmessage(None);
        self.ws.set_onopen(None);
        self.ws.set_onclose(None);
        let _ = self.ws.close();
    }
}

/// Opens `ws://<host><path>`, sends `ready` once open (then calls `on_open`), hands every text
/// frame to `on_text`, and calls `on_close` when the connection drops or cannot be made.
pub fn connect(
    path: &str,
    mut on_text: impl FnMut(String) + 'static,
    mut on_open: impl FnMut() + 'static,
    on_close: impl FnMut() + 'static,
) -> Result<Socket, ApiError> {
    let location = web_sys::window()
        .ok_or(ApiError::Client("no window".into()))?
        .location();
    let scheme = if location.protocol().unwrap_or_default() == "https:" {
        "wss"
    } else {
        "ws"
    };
    let host = location.host().map_err(js_err)?;
    let ws = WebSocket::new(&format!("{scheme}://{host}{path}")).map_err(js_err)?;
    let opened = ws.clone();
    let on_open = Closure::<dyn FnMut()>::new(move || {
        let _ = opened.send_with_str("ready");
        on_open();
    });
    let on_close = Closure::<dyn FnMut()>::new(on_close);
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
        if let Some(text) = e.data().as_string() {
            on_text(text);
        }
    });
    ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    ws.set_onclose(Some(on_close.as_ref().unchecked_ref()));
    Ok(Socket {
        ws,
        _on_open: on_open,
        _on_message: on_message,
        _on_close: on_close,
    })
}

/// localStorage get/set (ignoring a browser that refuses storage).
pub fn storage_get(key: &str) -> Option<String> {
    web_sys::window()?.local_storage().ok()??.get_item(key).ok()?
}

pub fn storage_set(key: &str, value: &str) {
    if let Some(s) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let _ = s.set_item(key, value);
    }
}

/// Hands `text` to the browser as a file download named `name`.
pub fn download(name: &str, mime: &str, text: &str) -> Result<(), ApiError> {
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let opts = web_sys::BlobPropertyBag::new();
    opts.set_type(mime);
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &opts).map_err(js_err)?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(js_err)?;
    let document = web_sys::window()
        .and_then(|w| w.document())
        .ok_or(ApiError::Client("no document".into()))?;
    let a: web_sys::HtmlAnchorElement = document.create_element("a").map_err(js_err)?.unchecked_into();
    a.set_href(&url);
    a.set_download(name);
    a.click();
    // The download has its own copy once started; free the blob a little later.
    let revoke = Closure::once_into_js(move || {
        let _ = web_sys::Url::revoke_object_url(&url);
    });
    if let Some(w) = web_sys::window() {
        let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(revoke.unchecked_ref(), 30_000);
    }
    Ok(())
}

/// The text of the first file chosen in a file input.
pub async fn read_chosen_file(input: &web_sys::HtmlInputElement) -> Result<String, ApiError> {
    let file = input
        .files()
        .and_then(|f| f.get(0))
        .ok_or(ApiError::Client("no file chosen".into()))?;
    JsFuture::from(file.text())
        .await
        .map_err(js_err)?
        .as_string()
        .ok_or(ApiError::Client("the file is not text".into()))
}

/// The server's text (not JSON) at `path`, e.g. an export to save as it is.
pub async fn get_text(path: &str) -> Result<String, ApiError> {
    send("GET", path, None).await
}
