#!/usr/bin/env python3
"""A loopback HTTP server that serves a directory and misbehaves on request.

    faultserver.py ROOT RULES_JSON LOG

It binds 127.0.0.1 on a free port, prints the port on stdout, and serves
files under ROOT. RULES_JSON maps a URL path (e.g. "/ds/images/a.jpg") to a
list of actions taken by that path's successive requests; when the list is
used up, the last action repeats. Actions:
  "ok"        serve the file
  "500"       answer 500 Internal Server Error
  "404"       answer 404 Not Found
  "stall"     send the headers, then nothing (the client must time out)
  "hang"      accept and never answer
  "truncate"  announce the file's length, send half of it, close
The rules file is re-read on each request, so a test can change them while
the server runs. Every request is appended to LOG as "PATH ACTION".
"""

import http.server
import json
import os
import socketserver
import sys
import threading
import time

ROOT = os.path.realpath(sys.argv[1])
RULES = sys.argv[2]
LOG = sys.argv[3]
counts = {}
lock = threading.Lock()


def action_for(path):
    try:
        with open(RULES) as f:
            rules = json.load(f)
    except (OSError, ValueError):
        rules = {}
    actions = rules.get(path)
    with lock:
        n = counts.get(path, 0)
        counts[path] = n + 1
        with open(LOG, "a") as log:
            act = (actions[min(n, len(actions) - 1)] if actions else "ok")
            log.write(f"{path} {act}\n")
    return act


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        act = action_for(path)
        if act == "hang":
            time.sleep(3600)
            return
        if act in ("500", "404"):
            body = b"no\n"
            self.send_response(int(act))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        local = os.path.realpath(os.path.join(ROOT, path.lstrip("/")))
        if not local.startswith(ROOT + os.sep) or not os.path.isfile(local):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with open(local, "rb") as f:
            data = f.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if act == "stall":
            self.wfile.flush()
            time.sleep(3600)
            return
        if act == "truncate":
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(data)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
