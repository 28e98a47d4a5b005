#!/bin/sh
# Regenerates src/paddock/models.py from the API's document with the pinned generator
# (pyproject.toml's `test` extra); tests/test_surface.py fails when the two differ.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec datamodel-codegen \
  --input "$here/../../docs/openapi.yaml" --input-file-type openapi \
  --output "${1:-$here/src/paddock/models.py}" \
  --output-model-type pydantic_v2.BaseModel --target-python-version 3.10 \
  --disable-timestamp --use-standard-collections --use-union-operator \
  --allow-population-by-field-name --formatters black isort
