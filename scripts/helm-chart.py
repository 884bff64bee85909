#!/usr/bin/env python3
"""Lints and renders a Helm chart offline with Helm's own Go library (the
helm-python-sdk wheel ships it; no helm binary, no cluster), for the
manifest tests.

usage: helm-chart.py <chart dir> <release namespace> <values as JSON>
prints: {"lint": <helm lint --strict report>, "manifests": {<template>: <YAML>}}
"""
import json
import sys

try:
    import helm_python
except ImportError:
    sys.exit("helm-chart.py: the helm-python-sdk package is missing; run `make test-deps`")


def main(chart, namespace, values_json):
    values = json.loads(values_json)
    report = helm_python.lint(chart, values, strict=True, namespace=namespace)
    manifests = helm_python.Chart.load(chart).render(
        values, name="toolserver", namespace=namespace, is_install=True
    )
    json.dump({"lint": report, "manifests": manifests}, sys.stdout)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
