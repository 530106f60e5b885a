#!/bin/sh
# Test double: an SMI tool that hangs (sleeps far beyond any timeout).
sleep 30
