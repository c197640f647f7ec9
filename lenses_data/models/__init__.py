"""Model access as production uses it: the OpenAI-compatible client (client.py), answer parsing
(parsing.py), the response journal (journal.py), endpoints and the probe, and the vLLM launcher
(serve.py). The simulator that stands in for vLLM lives in `lenses_data.simulator`.

Import from the submodules (e.g. `from lenses_data.models.client import ModelClient`); this package
imports nothing heavy so `import lenses_data` stays cheap.
"""
