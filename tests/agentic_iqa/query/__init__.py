"""Tests of reading a query without a model: distortions, objects, tools, options, regions."""
