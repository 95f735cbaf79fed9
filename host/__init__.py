"""Host-side tools that talk to a running firmware: SD-card image packer, framed serial
link, data streamer and training monitor (installed as ``zocodegen.host``)."""
