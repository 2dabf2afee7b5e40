"""llama.cpp as an engine of ``calibrate``: its binaries found and described, its benchmarks' output read, its
server driven on loopback (one request at a time and under load), and the profile's grids filled from them."""
