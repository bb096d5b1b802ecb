"""Unary calls to Portcullis with Python's grpcio (gRPC C-core), on raw bytes.

Reads from stdin one JSON object: {"target": "127.0.0.1:PORT", "calls": [...]},
each call {"name", "path", "request": hex of the encoded protobuf request,
"metadata": [[key, value], ...], "timeout": seconds, "compression": "gzip" or
null}. Writes to stdout one JSON object per call, in order, one per line:
{"name", "code": the status name ("OK", "INVALID_ARGUMENT", ...), "details",
"response": hex of the response bytes or null, "elapsed": seconds the call took}. The test encodes the requests
and decodes the answers, so no generated Python code is needed.
"""
import json
import sys
import time

import grpc


def identity(data):
    return data


def main():
    spec = json.load(sys.stdin)
    with grpc.insecure_channel(spec["target"]) as channel:
        # A fixed bound on connecting: the service is already listening.
        grpc.channel_ready_future(channel).result(timeout=10)
        for call in spec["calls"]:
            method = channel.unary_unary(call["path"], request_serializer=identity, response_deserializer=identity)
            compression = grpc.Compression.Gzip if call.get("compression") == "gzip" else grpc.Compression.NoCompression
            started = time.monotonic()
            try:
                response, _ = method.with_call(
                    bytes.fromhex(call["request"]),
                    metadata=[tuple(pair) for pair in call.get("metadata", [])],
                    timeout=call["timeout"],
                    compression=compression,
                )
                result = {"code": "OK", "details": "", "response": response.hex()}
            except grpc.RpcError as error:
                result = {"code": error.code().name, "details": error.details() or "", "response": None}
            result["elapsed"] = time.monotonic() - started
            print(json.dumps({"name": call["name"], **result}), flush=True)


if __name__ == "__main__":
    main()
