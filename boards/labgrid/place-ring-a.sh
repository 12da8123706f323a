#!/bin/sh
# Make the place of ring-a once, from any host that reaches the coordinator (docs/labgrid.md).
# LG_COORDINATOR=HOST:20408 (or labgrid-client -x HOST:20408 ...).
set -e
labgrid-client -p ring-a create
labgrid-client -p ring-a add-match '*/ring-a/NetworkSerialPort/*'
labgrid-client -p ring-a set-comment '16 Picos in a UART ring, 8 on host1 and 8 on host2 (picoring)'
labgrid-client -p ring-a show
