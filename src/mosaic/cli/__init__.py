"""Command-line interface; the entry point is :data:`mosaic.cli.main.app`."""
