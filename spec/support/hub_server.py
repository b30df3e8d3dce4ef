#!/usr/bin/env python3
"""A stand-in for the Hugging Face hub on 127.0.0.1, for spec/get_models_spec.lua.

    python3 spec/support/hub_server.py ROOT PORT_FILE [--wrong FILE]... [--seconds N]

Serves ROOT/<owner>/<repo>/<file> at /<owner>/<repo>/resolve/main/<file> as the hub does:
small files (< 1024 bytes) with ETag = their git blob SHA-1; larger ones answer with a 302
to /cdn/<path> and X-Linked-Etag = their SHA-256. --wrong FILE publishes a wrong hash for
that file name. Writes the port it listens on to PORT_FILE; stops after --seconds (30).
"""
import hashlib
import http.server
import os
import sys
import threading


def main():
    root, port_file = sys.argv[1], sys.argv[2]
    wrong, seconds, i = set(), 30.0, 3
    while i < len(sys.argv):
        if sys.argv[i] == "--wrong":
            wrong.add(sys.argv[i + 1])
        elif sys.argv[i] == "--seconds":
            seconds = float(sys.argv[i + 1])
        i += 2

    class Hub(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, body):
            path = self.path
            if path.startswith("/cdn/"):
                local = os.path.join(root, path[len("/cdn/"):])
                return self.send_file(local, {}, body)
            parts = path.strip("/").split("/")
            if len(parts) < 5 or parts[2:4] != ["resolve", "main"]:
                return self.send_error(404)
            relative = "/".join(parts[:2] + parts[4:])
            local = os.path.join(root, relative)
            if not os.path.isfile(local):
                return self.send_error(404)
            data = open(local, "rb").read()
            name = parts[-1]
            if len(data) < 1024:
                digest = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                if name in wrong:
                    digest = "0" * 40
                return self.send_file(local, {"ETag": '"%s"' % digest}, body)
            digest = hashlib.sha256(data).hexdigest()
            if name in wrong:
                digest = "f" * 64
            self.send_response(302)
            self.send_header("Location", "/cdn/" + relative)
            self.send_header("X-Linked-Etag", '"%s"' % digest)
            self.send_header("ETag", '"%s"' % hashlib.sha1(data).hexdigest())  # the pointer's, as the hub does
            self.send_header("Content-Length", "0")
            self.end_headers()

        def send_file(self, local, headers, body):
            if not os.path.isfile(local):
                return self.send_error(404)
            data = open(local, "rb").read()
            self.send_response(200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_HEAD(self):
            self.answer(False)

        def do_GET(self):
            self.answer(True)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    with open(port_file + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    threading.Timer(seconds, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
