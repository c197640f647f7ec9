"""Part of a stand-in for vLLM (see api_server.py)."""
