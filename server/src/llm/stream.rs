//! Token streaming: a reply's text shown while it is generated, without changing what is kept.
//!
//! A request may carry a [`Watch`](super::chat::Watch): a sink for the text of the reply as it arrives. When it is
//! wanted (someone watches) and the dialect and the configuration allow (`LLM_STREAM`, on by
//! default), the HTTP provider asks for a server-sent event stream, hands each piece of text to
//! the sink ([`StreamSink`](super::chat::StreamSink)) and builds from the events the very body a plain call would have got, which the
//! dialect reads as always. So a streamed call returns, records and replays exactly what an
//! unstreamed one does; the pieces only ever reach watchers.
//!
//! [`SseParser`] splits a byte stream into events. It works on bytes and decodes whole lines
//! only, so a character split across two chunks is read whole; a line that is not UTF-8 is an
//! error. It holds at most one unfinished event, and the provider caps the bytes it reads in all
//! (`max_response_bytes`), so a hostile stream cannot make it grow without bound. [`Scrubber`]
//! holds back the end of the text that could be the start of the API key, so a provider that
//! echoes the key cannot get it to a watcher, even split over pieces.

use super::config::{ApiKey, MIN_SECRET_LEN};

/// One server-sent event: its `event:` name, if any, and its `data:` lines joined by newlines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub(crate) name: Option<String>,
    pub(crate) data: String,
}

/// A line of the event stream that is not UTF-8 (with where the bytes go wrong).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the event stream is not UTF-8 ({0})")]
pub(crate) struct NotUtf8(std::str::Utf8Error);

/// Splits a `text/event-stream` body into events, fed chunk by chunk.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// The unfinished line.
    line: Vec<u8>,
    /// The event being read (fields seen since the last blank line).
    event: SseEvent,
    has_data: bool,
}

impl SseParser {
    /// Feeds one chunk; the events it completed, in order. Lines end with LF or CRLF; a line
    /// that is not UTF-8 is an error.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, NotUtf8> {
        let mut out = Vec::new();
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&rest[..i]);
            rest = &rest[i + 1..];
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(e) = self.line_done(&line)? {
                out.push(e);
            }
        }
        self.line.extend_from_slice(rest);
        Ok(out)
    }

    /// The stream ended: the event it left unfinished, if it has data (servers may omit the
    /// last blank line).
    pub(crate) fn finish(&mut self) -> Result<Option<SseEvent>, NotUtf8> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            self.line_done(&line)?;
        }
        self.line_done(b"")
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<SseEvent>, NotUtf8> {
        if line.is_empty() {
            let event = std::mem::take(&mut self.event);
            return Ok(std::mem::take(&mut self.has_data).then_some(event));
        }
        let line = std::str::from_utf8(line).map_err(NotUtf8)?;
        if line.starts_with(':') {
            return Ok(None); // a comment: keep-alive
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => {
                if self.has_data {
                    self.event.data.push('\n');
                }
                self.event.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event.name = Some(value.to_string()),
            _ => {}
        }
        Ok(None)
    }
}

/// Passes text on with any occurrence of the API key masked, holding back the last bytes that
/// could be the start of one until the next piece (or [`Scrubber::flush`]) says they are not.
pub(crate) struct Scrubber<'a> {
    key: Option<&'a ApiKey>,
    held: String,
}

impl<'a> Scrubber<'a> {
    /// Keys shorter than [`MIN_SECRET_LEN`] are not masked (see [`ApiKey::redact`]).
    pub(crate) fn new(key: Option<&'a ApiKey>) -> Scrubber<'a> {
        Scrubber { key: key.filter(|k| k.expose().chars().count() >= MIN_SECRET_LEN), held: String::new() }
    }

    /// The part of `piece` (with what was held) that is safe to show now.
    pub(crate) fn push(&mut self, piece: &str) -> String {
        let Some(key) = self.key else {
            return piece.to_string();
        };
        self.held.push_str(piece);
        let clean = key.redact(&self.held);
        let mut cut = clean.len().saturating_sub(key.expose().len() - 1);
        while !clean.is_char_boundary(cut) {
            cut -= 1;
        }
        self.held = clean[cut..].to_string();
        clean[..cut].to_string()
    }

    /// What is still held, masked: the reply is complete.
    pub(crate) fn flush(&mut self) -> String {
        let held = std::mem::take(&mut self.held);
        match self.key {
            Some(k) => k.redact(&held),
            None => held,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]]) -> Result<Vec<SseEvent>, NotUtf8> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(p.feed(c)?);
        }
        out.extend(p.finish()?);
        Ok(out)
    }

    fn data(d: &str) -> SseEvent {
        SseEvent { name: None, data: d.into() }
    }

    #[test]
    fn events_are_split_wherever_the_chunks_break() {
        let body = "data: {\"a\":1}\n\n: keep-alive\n\nevent: delta\ndata: x\ndata: y\r\n\r\ndata: [DONE]\n\n";
        let whole = events(&[body.as_bytes()]).unwrap();
        assert_eq!(
            whole,
            vec![data("{\"a\":1}"), SseEvent { name: Some("delta".into()), data: "x\ny".into() }, data("[DONE]")]
        );
        // Byte by byte gives the same events.
        let bytes: Vec<&[u8]> = body.as_bytes().chunks(1).collect();
        assert_eq!(events(&bytes).unwrap(), whole);
        // A last event without its blank line still counts.
        assert_eq!(events(&[b"data: end"]).unwrap(), vec![data("end")]);
    }

    #[test]
    fn a_character_split_across_chunks_is_read_whole_and_bad_utf8_is_an_error() {
        let body = "data: é€😀\n\n".as_bytes();
        for cut in 1..body.len() {
            assert_eq!(events(&[&body[..cut], &body[cut..]]).unwrap(), vec![data("é€😀")], "cut at {cut}");
        }
        let e = events(&[b"data: \xff\xfe\n\n"]).unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
    }

    #[test]
    fn the_key_never_leaves_the_scrubber_even_split_over_pieces() {
        let key = ApiKey::new("sk-secret-123456").unwrap();
        let mut s = Scrubber::new(Some(&key));
        let text = "echo sk-secret-123456 and é sk-sec";
        let mut out = String::new();
        for c in text.chars() {
            out.push_str(&s.push(&c.to_string()));
            assert!(!out.contains("sk-secret-123456"));
        }
        out.push_str(&s.flush());
        assert_eq!(out, "echo *** and é sk-sec");
        let x = ApiKey::new("x");
        let mut open = Scrubber::new(x.as_ref());
        assert_eq!(open.push("x marks"), "x marks", "placeholder keys are not masked");
    }
}
