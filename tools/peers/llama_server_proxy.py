#!/usr/bin/env python3
"""Puts token ids into llama-server's streamed completions, for `tpserve-cli bench`.

tpserve-cli bench --backend openai counts a streamed /v1/completions event's tokens by
its choices[].token_ids (as tpserve and vLLM send them with return_token_ids).
llama-server's OpenAI-style stream carries only text, and a token whose text is held back
(an incomplete UTF-8 sequence, a possible stop string) comes as an event with empty text,
so its tokens cannot be counted from it. Its native endpoint (POST /completions) sends
one event per sampled token with that token's id in "tokens". This proxy takes the
bench's /v1/completions request, sends it to the native endpoint and rewrites every
event as an OpenAI completion chunk with token_ids, then a usage chunk and [DONE].
Everything else (GET /health, /v1/models) passes through.

  llama_server_proxy.py --listen-port P --upstream http://127.0.0.1:Q

Standard library only; one thread per connection, as the bench opens one per request.
Its cost per token (one small JSON parse and dump) is far below a decode step here.
"""
import argparse
import http.client
import http.server
import json
import sys
import urllib.parse


def native_body(request):
    """The native /completions body for an OpenAI /v1/completions request."""
    body = {
        "prompt": request["prompt"],
        "n_predict": request.get("max_tokens", 16),
        "stream": True,
        "return_tokens": True,
        "ignore_eos": bool(request.get("ignore_eos", False)),
        "temperature": request.get("temperature", 1.0),
    }
    if "seed" in request:
        body["seed"] = request["seed"] & 0xFFFFFFFF  # llama.cpp's seed is 32 bits
    return body


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream = None  # (host, port)

    def log_message(self, *args):
        pass

    def _connect(self):
        return http.client.HTTPConnection(*self.upstream, timeout=3600)

    def _passthrough(self, method, body=None):
        conn = self._connect()
        try:
            conn.request(method, self.path, body=body,
                         headers={"Content-Type": "application/json"} if body else {})
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            self.send_error(502, str(e))
            return
        finally:
            conn.close()
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._passthrough("GET")

    def _event(self, obj):
        data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
        chunk = ("data: " + data + "\n\n").encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        self.wfile.flush()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if urllib.parse.urlsplit(self.path).path != "/v1/completions":
            self._passthrough("POST", raw)
            return
        request = json.loads(raw)
        if not request.get("stream"):
            self.send_error(400, "this proxy serves streamed completions only")
            return
        conn = self._connect()
        try:
            conn.request("POST", "/completions", body=json.dumps(native_body(request)),
                         headers={"Content-Type": "application/json",
                                  "Accept": "text/event-stream"})
            resp = conn.getresponse()
        except OSError as e:
            conn.close()
            self.send_error(502, str(e))
            return
        if resp.status != 200:
            data = resp.read()
            conn.close()
            self.send_response(resp.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        model = request.get("model", "")
        usage = None
        sent = 0  # token ids passed on so far
        try:
            for line in resp:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    self._event({"error": event["error"]})
                    break
                tokens = list(event.get("tokens") or [])
                stop = event.get("stop", False)
                # A token whose text is an incomplete UTF-8 sequence gets no event of its
                # own, and the next event names only its own token; tokens_predicted
                # counts them all, so the ones held back are added here (their ids
                # unknown: -1), at the time they reach the client.
                predicted = event.get("tokens_predicted")
                if stop:
                    tokens = []  # the final event repeats nothing in a stream
                if isinstance(predicted, int) and predicted > sent + len(tokens):
                    tokens = [-1] * (predicted - sent - len(tokens)) + tokens
                sent += len(tokens)
                if tokens or event.get("content"):
                    self._event({"object": "text_completion", "model": model, "choices": [
                        {"index": 0, "text": event.get("content", ""), "token_ids": tokens,
                         "finish_reason": "length" if stop else None}]})
                if stop:
                    usage = {"prompt_tokens": event.get("tokens_evaluated", 0),
                             "completion_tokens": event.get("tokens_predicted", 0)}
                    break
            if usage is not None:
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                self._event({"object": "text_completion", "model": model, "choices": [],
                             "usage": usage})
                self._event("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (OSError, ValueError):
            pass  # the client or llama-server went away: the bench counts it as failed
        finally:
            conn.close()
        self.close_connection = True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--listen-port", type=int, required=True)
    parser.add_argument("--listen-host", default="127.0.0.1")
    parser.add_argument("--upstream", required=True, help="http://HOST:PORT of llama-server")
    args = parser.parse_args()
    url = urllib.parse.urlsplit(args.upstream)
    Handler.upstream = (url.hostname, url.port or 80)
    server = http.server.ThreadingHTTPServer((args.listen_host, args.listen_port), Handler)
    server.daemon_threads = True
    print("llama_server_proxy: serving on http://%s:%d for %s" %
          (args.listen_host, args.listen_port, args.upstream), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
