"""`voxgate.gateway.client`, kept for the imports README and docs name: the protocol client lives in the SDK's
package (gateway/sdk/protocol_client.py, installed as `voxgate.client.protocol_client`)."""

from voxgate.client.protocol_client import ContextResult, SessionError, VoxgateClient, split_packets

__all__ = ["ContextResult", "SessionError", "VoxgateClient", "split_packets"]
