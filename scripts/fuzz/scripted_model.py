"""An OpenAI-compatible chat completions endpoint on loopback for the API
fuzzer: every request is answered with one short streamed text reply, so
agent turns the fuzzer starts run to the end against a real HTTP model."""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        chunks = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "fuzzed "}}]},
            {"choices": [{"index": 0, "delta": {"content": "reply"}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}},
        ]
        body = "".join(
            f"data: {json.dumps(dict(chunk, id='c', object='chat.completion.chunk', model='m'))}\n\n"
            for chunk in chunks
        ) + "data: [DONE]\n\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
