"""A real S3 server on 127.0.0.1 (moto's, over HTTP) that a test or a benchmark can count, fail and restart.

moto keeps its buckets in this process, so a server stopped and started again on the same port comes back
with everything it held: a storage outage, not a lost bucket. Faults are injected at the HTTP layer, where
pyarrow's S3 client meets them as it would meet AWS:

    server.fail("unavailable")   every request answered 503 SlowDown (a throttled or failing endpoint)
    server.fail("credentials")   every request answered 403 InvalidAccessKeyId (credentials expired)
    server.fail(None)            requests served again
    server.stop(); server.start()   the endpoint gone (connections refused), then back on the same port
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

ERRORS = {
    "unavailable": ("503 Service Unavailable", "SlowDown", "Please reduce your request rate."),
    "credentials": ("403 Forbidden", "InvalidAccessKeyId", "The AWS Access Key Id you provided does not exist."),
}


class S3Server:
    def __init__(self, bucket: str = "studies") -> None:
        self.bucket, self.port, self.requests = bucket, 0, 0
        self.fault: str | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def env(self) -> dict[str, str]:
        """What points AWS clients (pyarrow's, boto3) at this server."""
        return {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}"}

    def start(self) -> "S3Server":
        from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        app = DomainDispatcherApplication(create_backend_app)
        self._server = make_server("127.0.0.1", self.port, self._counted(app), threaded=True,
                                   request_handler=MotoRequestHandler)
        self.port = self._server.server_address[1]  # the same port on a restart
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def reset(self) -> None:
        """An empty store with one bucket (moto's state outlives a server object in this process)."""
        import boto3
        import requests

        requests.post(f"{self.env['AWS_ENDPOINT_URL']}/moto-api/reset", timeout=30)
        boto3.client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL"], aws_access_key_id="test",
                     aws_secret_access_key="test", region_name="us-east-1").create_bucket(Bucket=self.bucket)
        self.requests = 0

    def fail(self, fault: str | None) -> None:
        assert fault is None or fault in ERRORS, fault
        self.fault = fault

    def _counted(self, app: Callable) -> Callable:
        from werkzeug.wsgi import get_input_stream

        def served(environ: dict, start_response: Callable) -> Any:
            with self._lock:
                self.requests += 1
            if self.fault is None:
                return app(environ, start_response)
            status, code, message = ERRORS[self.fault]
            get_input_stream(environ).read()  # the client's body (as long as it says), so it reads the answer
            body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                    f"<Message>{message}</Message></Error>").encode()
            if environ["REQUEST_METHOD"] == "HEAD":  # an answer to HEAD has no body
                body = b""
            start_response(status, [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
            return [body]
        return served


def mirrored_files(folder: Path) -> dict[str, bytes]:
    """{relative path: bytes} of every file a mirror carries from `folder` (not its machine-local records)."""
    from sptune.records import storage

    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*")
            if path.is_file() and path.name not in storage.LOCAL_ONLY}


def held(uri: str) -> dict[str, bytes]:
    """{relative path: bytes} a mirror's storage holds, Tune's snapshot (one tar object) unpacked to its files."""
    import io
    import tarfile

    from sptune.records import storage

    fs, root = storage.filesystem(uri)
    found = {rel: fs.open_input_stream(f"{root}/{rel}").read() for rel in storage._listing(fs, root)}
    if storage.TUNE_STATE in found:
        with tarfile.open(fileobj=io.BytesIO(found.pop(storage.TUNE_STATE))) as tar:
            found.update({member.name: tar.extractfile(member).read() for member in tar.getmembers()})
    return found
