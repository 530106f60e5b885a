#!/bin/sh
# Test double: prints the fixture named by $SMI_FIXTURE whatever its arguments.
cat "$SMI_FIXTURE"
