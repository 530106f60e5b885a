#!/bin/sh
# Test double: an SMI tool that fails (no GPU / driver not loaded).
echo "ERROR: amdgpu driver not loaded" >&2
exit 3
