"""The moto server (pinned in requirements/emulator.txt) with DynamoDB requests serialised.

Why: moto rolls back a cancelled TransactWriteItems by putting back a deep copy of every table
the transaction touched, taken when it started (moto/dynamodb/models/__init__.py,
`transact_write_items`). With moto's threaded server, a write that another request committed in
between is lost, and the table object (with its stream shard) is replaced, so open shard
iterators go on reading the old shard. On AWS transactions are isolated and nothing is lost.
Serialising DynamoDB and DynamoDB Streams requests restores that; every other service (SQS long
polls in particular) stays concurrent.

One more trace of the rollback remains: moto writes a cancelled transaction's items to the live
table (and its stream shard) before putting the copies back, and a shard iterator taken before
the rollback still points at the old shard, so it would return the cancelled writes as stream
records (and the next committed write reuses their sequence numbers). `transact_write_items`
is wrapped to take those records back out of the old shards. On AWS a cancelled transaction
never reaches the stream.

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


def _forget_cancelled_stream_records():
    """Wraps moto's TransactWriteItems so that a cancelled transaction leaves no stream record."""
    from moto.dynamodb.models import DynamoDBBackend

    original = DynamoDBBackend.transact_write_items

    def transact_write_items(self, transact_items):
        shards = []
        for item in transact_items:
            _, op = next(iter(item.items()))
            table = self.tables.get(op.get("TableName") or "")
            shard = getattr(table, "stream_shard", None)
            if shard is not None and all(shard is not s for s, _ in shards):
                shards.append((shard, len(shard.items)))
        try:
            return original(self, transact_items)
        except Exception:
            for shard, length in shards:
                del shard.items[length:]
            raise

    DynamoDBBackend.transact_write_items = transact_write_items


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
    _forget_cancelled_stream_records()
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
