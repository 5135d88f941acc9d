//! What any page offers a test: go to an address, find, click, type, choose, wait for a selector,
//! a count, a text or a value, run a script, read texts, rectangles and the address. Every wait
//! ends at [`WAIT`](super::WAIT) with a failure that says what the page showed instead.

use std::time::{Duration, Instant};

use fantoccini::Locator;
use fantoccini::elements::Element;
use serde_json::{Value, json};

use super::{Browser, WAIT, eventually};

/// Whether a WebDriver call failed only because the page drew the element again after it was
/// found.
fn is_stale(e: &fantoccini::error::CmdError) -> bool {
    matches!(
        e,
        fantoccini::error::CmdError::Standard(w)
            if w.error == fantoccini::error::ErrorStatus::StaleElementReference
    )
}

impl Browser {
    /// Goes to `path` on the server.
    pub async fn open(&self, path: &str) {
        self.client.goto(&self.server.url(path)).await.expect("goto");
    }

    /// Waits for an element matching `css`.
    pub async fn wait_css(&self, css: &str) -> Element {
        self.client
            .wait()
            .at_most(WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("waiting for {css}: {e}"))
    }

    /// Does `act` on the element `css`. An element drawn again between being found and being
    /// used is found afresh, until the usual deadline.
    async fn on_fresh(
        &self,
        css: &str,
        what: &str,
        act: impl AsyncFn(Element) -> Result<(), fantoccini::error::CmdError>,
    ) {
        let deadline = Instant::now() + WAIT;
        loop {
            match act(self.wait_css(css).await).await {
                Ok(()) => return,
                Err(e) if is_stale(&e) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => panic!("{what} {css}: {e}"),
            }
        }
    }

    /// Clicks `css`.
    pub async fn click(&self, css: &str) {
        self.on_fresh(css, "click", async |el| el.click().await.map(drop)).await
    }

    /// Chooses `value` in the select `css`.
    pub async fn select(&self, css: &str, value: &str) {
        self.on_fresh(css, &format!("select {value} in"), async |el| el.select_by_value(value).await).await
    }

    /// How many elements match `css` now.
    pub async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.map(|v| v.len()).unwrap_or(0)
    }

    /// Polls until `css` matches exactly `n` elements.
    pub async fn wait_count(&self, css: &str, n: usize) {
        eventually(async || match self.count(css).await {
            c if c == n => Ok(()),
            c => Err(format!("{css}: {c} elements, expected {n}")),
        })
        .await
    }

    /// Polls until `css` exists and is not disabled.
    pub async fn wait_enabled(&self, css: &str) {
        let probe = format!("const e = document.querySelector(\"{css}\"); return !!e && !e.disabled;");
        eventually(async || match self.js(&probe).await == json!(true) {
            true => Ok(()),
            false => Err(format!("{css} stayed disabled")),
        })
        .await
    }

    /// The text of the first element matching `css`, `None` when there is none.
    pub async fn text_of(&self, css: &str) -> Option<String> {
        let el = self.client.find(Locator::Css(css)).await.ok()?;
        Some(el.text().await.unwrap_or_default())
    }

    /// The text of `css`, once it is there.
    pub async fn text(&self, css: &str) -> String {
        let el = self.wait_css(css).await;
        el.text().await.unwrap_or_else(|e| panic!("the text of {css}: {e}"))
    }

    /// Polls until the text of `css` contains `needle`; returns the text.
    pub async fn wait_text(&self, css: &str, needle: &str) -> String {
        eventually(async || {
            let text = self.text_of(css).await.unwrap_or_default();
            match text.contains(needle) {
                true => Ok(text),
                false => Err(format!("{css} never contained {needle:?}; last text: {text:?}")),
            }
        })
        .await
    }

    /// Waits until the text of `css` is `want` (what the API says the page should show); fails
    /// naming both.
    pub async fn shows(&self, css: &str, want: &str) {
        eventually(async || {
            let text = self.text_of(css).await.unwrap_or_else(|| "(absent)".into());
            match text.trim() == want {
                true => Ok(()),
                false => Err(format!("{css} shows {text:?}; the API says {want:?}")),
            }
        })
        .await
    }

    /// Waits until the text of `css` is JSON equal to `want`.
    pub async fn shows_json(&self, css: &str, want: &Value) {
        eventually(async || {
            let text = self.text_of(css).await.unwrap_or_default();
            match serde_json::from_str::<Value>(&text).ok().as_ref() == Some(want) {
                true => Ok(()),
                false => Err(format!("{css} shows {text}; the API says {want}")),
            }
        })
        .await
    }

    /// Runs a script in the page and returns its value.
    pub async fn js(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap_or_else(|e| panic!("{script}: {e}"))
    }

    /// Clears the field `css` and types `value` into it.
    pub async fn set_input(&self, css: &str, value: &str) {
        let el = self.wait_css(css).await;
        el.clear().await.expect("clear");
        el.send_keys(value).await.expect("type");
    }

    /// Sets the value of the field `css` as typing would end, and fires `event` (`input` or
    /// `change`) on it: for long texts (a JSON document) and fields that listen to `change`.
    pub async fn fill(&self, css: &str, value: &str, event: &str) {
        self.wait_css(css).await;
        self.client
            .execute(
                "const el = document.querySelector(arguments[0]); el.value = arguments[1];\
                 el.dispatchEvent(new Event(arguments[2], {bubbles: true}));",
                vec![json!(css), json!(value), json!(event)],
            )
            .await
            .unwrap_or_else(|e| panic!("fill {css}: {e}"));
    }

    /// Types `text` into the field `css` (an `input` event) and presses Enter in it.
    pub async fn type_enter(&self, css: &str, text: &str) {
        self.fill(css, text, "input").await;
        self.js(&format!(
            "document.querySelector(\"{css}\").dispatchEvent(new KeyboardEvent('keydown', {{key: 'Enter', bubbles: true, cancelable: true}}));"
        ))
        .await;
    }

    /// Presses `key` as the page sees it (a keydown that bubbles up to the window's listener).
    pub async fn key(&self, key: &str) {
        self.js(&format!(
            "document.body.dispatchEvent(new KeyboardEvent('keydown', {{key: '{key}', bubbles: true, cancelable: true}}));"
        ))
        .await;
    }

    /// The value of a form field.
    pub async fn value_of(&self, css: &str) -> String {
        self.wait_css(css).await.prop("value").await.unwrap().unwrap_or_default()
    }

    /// Polls until the value of the field `css` contains `needle`; returns the value.
    pub async fn wait_value(&self, css: &str, needle: &str) -> String {
        eventually(async || {
            let value = self.wait_css(css).await.prop("value").await.ok().flatten().unwrap_or_default();
            match value.contains(needle) {
                true => Ok(value),
                false => Err(format!("{css} never held {needle:?}; last: {value:?}")),
            }
        })
        .await
    }

    /// Polls until the value of the field `css` is `want`.
    pub async fn wait_value_is(&self, css: &str, want: &str) {
        eventually(async || match self.value_of(css).await {
            now if now == want => Ok(()),
            now => Err(format!("{css} holds {now:?}, expected {want:?}")),
        })
        .await
    }

    /// The texts of every element matching `css`, trimmed.
    pub async fn texts(&self, css: &str) -> Vec<String> {
        let v =
            self.js(&format!("return [...document.querySelectorAll(\"{css}\")].map(e => e.textContent.trim());")).await;
        v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
    }

    /// The screen rectangle of the first element matching `css`: [left, top, right, bottom].
    pub async fn rect(&self, css: &str) -> [f64; 4] {
        let v = self
            .js(&format!(
                "const r = document.querySelector(\"{css}\").getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];"
            ))
            .await;
        let n = |i: usize| v[i].as_f64().unwrap_or(f64::NAN);
        [n(0), n(1), n(2), n(3)]
    }

    /// The page's address: path and query.
    pub async fn address(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        format!("{}?{}", url.path(), url.query().unwrap_or_default())
    }

    /// Polls until the page's address is `want`.
    pub async fn wait_address(&self, want: &str) {
        eventually(async || match self.address().await {
            now if now == want => Ok(()),
            now => Err(format!("the address is {now}, expected {want}")),
        })
        .await
    }

    /// Records the page's console errors and uncaught errors (a wasm panic logs one of each) in
    /// `window.__errors`.
    pub async fn capture_errors(&self) {
        self.js("window.__errors = []; const log = console.error.bind(console); \
                 console.error = (...a) => { window.__errors.push(a.map(String).join(' ')); log(...a); }; \
                 window.addEventListener('error', e => window.__errors.push(String(e.message)));")
            .await;
    }

    /// The errors [`Browser::capture_errors`] recorded.
    pub async fn page_errors(&self) -> Vec<String> {
        let v = self.js("return window.__errors || [];").await;
        v.as_array().into_iter().flatten().map(|e| e.as_str().unwrap_or_default().to_string()).collect()
    }

    /// Keeps, from now on, the body of each request the page sends with a body, by address, in
    /// the page, for [`Browser::sent`].
    pub async fn capture_requests(&self) {
        self.js(r#"window.__sent = window.__sent || [];
            if (!window.__fetchKept) {
                window.__fetchKept = window.fetch;
                window.fetch = function (input, init) {
                    const url = typeof input === 'string' ? input : input.url;
                    const body = init && init.body;
                    if (typeof body === 'string') window.__sent.push([url, body]);
                    else if (input instanceof Request && input.method !== 'GET')
                        input.clone().text().then(t => window.__sent.push([url, t]));
                    return window.__fetchKept.apply(this, arguments);
                };
            }"#)
            .await;
    }

    /// The body of the last request the page sent to an address containing `part` (since
    /// [`Browser::capture_requests`]), once there is one that `ok` accepts.
    pub async fn sent(&self, part: &str, ok: impl Fn(&Value) -> bool) -> Value {
        eventually(async || {
            let all = self.js("return window.__sent || [];").await;
            let last = all
                .as_array()
                .into_iter()
                .flatten()
                .rev()
                .find(|r| r[0].as_str().is_some_and(|u| u.contains(part)))
                .and_then(|r| serde_json::from_str::<Value>(r[1].as_str()?).ok());
            match last {
                Some(body) if ok(&body) => Ok(body),
                other => Err(format!("the page sent no such request to …{part}: last {other:?}")),
            }
        })
        .await
    }

    /// Keeps, from now on, what the page downloads (a link clicked with `download`) in the page,
    /// for [`Browser::downloaded`].
    pub async fn capture_downloads(&self) {
        self.js(r#"window.__downloads = {};
            HTMLAnchorElement.prototype.click = function () {
                const name = this.download;
                fetch(this.href).then(r => r.text()).then(t => { window.__downloads[name] = t; });
            };"#)
            .await;
    }

    /// The text of the file `name` once the page has downloaded it.
    pub async fn downloaded(&self, name: &str) -> String {
        eventually(async || {
            let got = self.js(&format!("return window.__downloads['{name}'] || null")).await;
            got.as_str().map(str::to_string).ok_or_else(|| format!("{name} was never downloaded"))
        })
        .await
    }
}
