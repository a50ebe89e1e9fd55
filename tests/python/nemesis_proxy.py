"""A TCP proxy the tests control, for partitions between nodes on one machine: it forwards
one node's Raft connections to another's Raft port until `cut()`, which closes every
connection it carries and refuses new ones until `heal()`. Each direction between two nodes
has its own proxy, so a test can isolate one node or split the group as it likes."""

import socket
import threading


class Proxy:
    def __init__(self, listen_host, target):
        self.target = target
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind((listen_host, 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.cut_off = False
        self.lock = threading.Lock()
        self.sockets = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                if self.cut_off:
                    client.close()
                    continue
                try:
                    upstream = socket.create_connection(self.target, timeout=1)
                except OSError:
                    client.close()
                    continue
                upstream.settimeout(None)
                self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data or self.cut_off:
                    break
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        with self.lock:
            self.cut_off = True
            sockets, self.sockets = self.sockets, []
        for s in sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def heal(self):
        with self.lock:
            self.cut_off = False

    def close(self):
        self.closed = True
        self.cut()
        self.server.close()
