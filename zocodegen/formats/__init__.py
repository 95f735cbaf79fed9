"""What the firmware and the host tools both read and write, defined once: the data image
(image.py), the host link's messages (link.py) and the status codes (status.py). The host
builds on these; the generator renders the C side of them into every project."""
