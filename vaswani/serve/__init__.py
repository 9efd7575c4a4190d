"""`vaswani serve`: translation over HTTP, a page for people and the LibreTranslate API and a native one for
programs (docs/serving.md).

models.py (the pairs and their folders), batching.py (dynamic batching in worker
threads), limits.py (request limits, API keys, rate limits), schema.py (what each endpoint takes and answers, checked
on arrival), spec.py (the OpenAPI description of /spec), page.py (the translation page at /, its files in static/),
metrics.py (/metrics), app.py (the FastAPI application and uvicorn). Needs the `serve` extra: pip install -c
constraints.txt -e ".[serve]".
"""
