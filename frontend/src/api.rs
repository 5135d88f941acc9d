//! Talking to the server from the browser: JSON over `fetch`, and WebSockets that send the
//! `ready` handshake on open. Errors come back as the server's `detail` text.

use serde::de::DeserializeOwned;
use serde_json::Value;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{MessageEvent, Request, RequestInit, Response, WebSocket};

fn js_err(e: JsValue) -> String {
    e.as_string().unwrap_or_else(|| format!("{e:?}"))
}

async fn send(method: &str, path: &str, body: Option<&Value>) -> Result<String, String> {
    let init = RequestInit::new();
    init.set_method(method);
    if let Some(b) = body {
        init.set_body(&JsValue::from_str(&b.to_string()));
    }
    let req = Request::new_with_str_and_init(path, &init).map_err(js_err)?;
    if body.is_some() {
        req.headers().set("content-type", "application/json").map_err(js_err)?;
    }
    let window = web_sys::window().ok_or("no window")?;
    let resp: Response = JsFuture::from(window.fetch_with_request(&req))
        .await
        .map_err(js_err)?
        .unchecked_into();
    let text = JsFuture::from(resp.text().map_err(js_err)?)
        .await
        .map_err(js_err)?
        .as_string()
        .unwrap_or_default();
    if resp.ok() {
        Ok(text)
    } else {
        let detail = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["detail"].as_str().map(str::to_string))
            .unwrap_or(text);
        Err(format!("{} {}: {detail}", resp.status(), path))
    }
}

fn parse<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text).map_err(|e| format!("unexpected response: {e}"))
}

pub async fn get<T: DeserializeOwned>(path: &str) -> Result<T, String> {
    parse(&send("GET", path, None).await?)
}

pub async fn post<T: DeserializeOwned>(path: &str, body: &Value) -> Result<T, String> {
    parse(&send("POST", path, Some(body)).await?)
}

pub async fn delete(path: &str) -> Result<(), String> {
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

/// An open WebSocket; closed when dropped.
pub struct Socket {
    ws: WebSocket,
    _on_open: Closure<dyn FnMut()>,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
}

impl Drop for Socket {
    fn drop(&mut self) {
        self.ws.set_onmessage(None);
        self.ws.set_onopen(None);
        let _ = self.ws.close();
    }
}

/// Opens `ws://<host><path>`, sends `ready` once open, and hands every text frame to `on_text`.
pub fn connect(path: &str, mut on_text: impl FnMut(String) + 'static) -> Result<Socket, String> {
    let location = web_sys::window().ok_or("no window")?.location();
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
    });
    let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |e: MessageEvent| {
        if let Some(text) = e.data().as_string() {
            on_text(text);
        }
    });
    ws.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    ws.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    Ok(Socket {
        ws,
        _on_open: on_open,
        _on_message: on_message,
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
