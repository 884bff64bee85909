//! The server-sent events of a streaming answer, read as they arrive and
//! decoded into model events by the provider's decoder; `data: [DONE]` or the
//! end of the body closes the pass.

use std::collections::VecDeque;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::stream::{self, BoxStream};
use futures::StreamExt;

use super::send::transport_error;
use crate::provider::{ModelEvent, ModelStream, ProviderError};

type SseItem = Result<Event, EventStreamError<reqwest::Error>>;

/// Turns one provider's events into model events.
pub(super) trait Decode: Send + 'static {
    /// The model events of one server-sent event named `name` (`message`
    /// when the server names none) carrying `data`.
    fn event(&mut self, name: &str, data: &str) -> Result<Vec<ModelEvent>, ProviderError>;

    /// The closing event, once the stream is over.
    fn finish(&mut self) -> Result<ModelEvent, ProviderError>;
}

/// The events of a 2xx streaming answer, decoded by `decoder`.
pub(super) fn events(response: reqwest::Response, decoder: impl Decode) -> ModelStream {
    let pump = Pump {
        sse: response.bytes_stream().eventsource().boxed(),
        decoder,
        ready: VecDeque::new(),
        done: false,
    };
    stream::unfold(pump, Pump::next).boxed()
}

/// Reads server-sent events until one or more model events are ready.
struct Pump<D> {
    sse: BoxStream<'static, SseItem>,
    decoder: D,
    ready: VecDeque<ModelEvent>,
    done: bool,
}

impl<D: Decode> Pump<D> {
    async fn next(mut self) -> Option<(Result<ModelEvent, ProviderError>, Self)> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some((Ok(event), self));
            }
            if self.done {
                return None;
            }
            let item = self.sse.next().await;
            if let Err(err) = self.read(item) {
                self.done = true;
                return Some((Err(err), self));
            }
        }
    }

    /// Decodes one server-sent event, or closes the pass at the end.
    fn read(&mut self, item: Option<SseItem>) -> Result<(), ProviderError> {
        let event = match item {
            Some(Ok(event)) => event,
            Some(Err(EventStreamError::Transport(err))) => return Err(transport_error(&err)),
            Some(Err(err)) => return Err(ProviderError::Protocol(err.to_string())),
            None => return self.close(),
        };
        match event.data.trim() {
            "" => Ok(()),
            "[DONE]" => self.close(),
            data => {
                let name = if event.event.is_empty() {
                    "message"
                } else {
                    event.event.as_str()
                };
                self.ready.extend(self.decoder.event(name, data)?);
                Ok(())
            }
        }
    }

    fn close(&mut self) -> Result<(), ProviderError> {
        self.done = true;
        self.ready.push_back(self.decoder.finish()?);
        Ok(())
    }
}
