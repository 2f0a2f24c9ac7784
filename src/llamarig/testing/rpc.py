"""The multi-device rig for tests: rpc-servers on loopback (llamarig.launch.rpc), each exposing
this machine's CPU as one device of a real ``llama-server --rpc`` run."""

from llamarig.launch.rpc import (
    RpcServer,
    rpc_argument,
    rpc_server_binary,
    start_rpc_server,
    start_rpc_servers,
)

__all__ = ["RpcServer", "rpc_argument", "rpc_server_binary", "start_rpc_server", "start_rpc_servers"]
