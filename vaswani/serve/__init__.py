"""`vaswani serve`: translation over HTTP with the LibreTranslate API and a native one (docs/serving.md).

models.py (the pairs and their folders), text.py (sentences and HTML), batching.py (dynamic batching in a worker
thread), limits.py (request limits, API keys, rate limits), metrics.py (/metrics), app.py (the FastAPI application
and uvicorn). Needs the `serve` extra: pip install -c constraints.txt -e ".[serve]".
"""
