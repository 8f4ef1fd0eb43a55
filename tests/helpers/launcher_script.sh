#!/bin/sh
# As PyTorch's test/distributed/launcher/bin/test_script.sh: touches
# DIR/RANK, saying so.
echo "creating $1/$RANK"
touch "$1/$RANK"
