//! The server-sent events of an answer, read as they arrive and decoded into
//! model events; `data: [DONE]` (or the end of the body) closes the pass.

use std::collections::VecDeque;

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::stream::{self, BoxStream};
use futures::StreamExt;

use super::decode::Decoder;
use super::send::transport_error;
use crate::provider::{ModelEvent, ModelStream, ProviderError};

type SseItem = Result<Event, EventStreamError<reqwest::Error>>;

/// The events of a 2xx streaming answer.
pub(super) fn events(response: reqwest::Response) -> ModelStream {
    let pump = Pump {
        sse: response.bytes_stream().eventsource().boxed(),
        decoder: Decoder::default(),
        ready: VecDeque::new(),
        done: false,
    };
    stream::unfold(pump, Pump::next).boxed()
}

/// Reads server-sent events until one or more model events are ready.
struct Pump {
    sse: BoxStream<'static, SseItem>,
    decoder: Decoder,
    ready: VecDeque<ModelEvent>,
    done: bool,
}

impl Pump {
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
                self.ready.extend(self.decoder.chunk(data)?);
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
