"""mosaic studio: a local web app for what-if exploration over the library (issue 14).

``create_app`` (``mosaic.studio.app``) builds the FastAPI app; ``serve``
(``mosaic.studio.server``) runs it under uvicorn. Needs ``mosaic[studio]``.
"""
