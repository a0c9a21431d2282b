"""The moto server (pinned in requirements/emulator.txt) with DynamoDB requests serialised.

Why: moto rolls back a cancelled TransactWriteItems by putting back a deep copy of every table
the transaction touched, taken when it started (moto/dynamodb/models/__init__.py,
`transact_write_items`). With moto's threaded server, a write that another request committed in
between is lost, and the table object (with its stream shard) is replaced, so open shard
iterators go on reading the old shard. On AWS transactions are isolated and nothing is lost.
Serialising DynamoDB and DynamoDB Streams requests restores that; every other service (SQS long
polls in particular) stays concurrent.

Usage: python scripts/moto_server.py -H 127.0.0.1 -p PORT
"""

import argparse
import threading

from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)

_DYNAMODB_LOCK = threading.Lock()


class SerialiseDynamoDB:
    """WSGI middleware: one DynamoDB / DynamoDB Streams request at a time."""

    def __init__(self, app):
        self.app = app

    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target.startswith("DynamoDB_") or target.startswith("DynamoDBStreams_"):
            with _DYNAMODB_LOCK:
                # Materialise the body inside the lock: moto computes it lazily.
                return list(self.app(environ, start_response))
        return self.app(environ, start_response)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()
    import os

    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(
        args.host,
        args.port,
        SerialiseDynamoDB(app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )


if __name__ == "__main__":
    main()
