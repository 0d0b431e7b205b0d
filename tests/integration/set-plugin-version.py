#!/usr/bin/python3
"""set-plugin-version.py FILE MAJOR.MINOR.MICRO: rewrite a Slurm plugin's plugin_version.

Slurm reads a plugin's `const uint32_t plugin_version` before anything else of it and refuses
a plugin of another release (plugin.c: major.minor.micro, major.minor for SPANK). A copy of a
plugin with another release's number there meets that check as a plugin built against that
release does, so plugin-release.sh can test the refusal on any release with one build.
Only 64-bit little-endian ELF shared objects (what Debian's amd64 and arm64 build) are taken.
"""
import struct
import sys


def die(msg):
    sys.stderr.write("set-plugin-version.py: %s\n" % msg)
    sys.exit(1)


def main():
    if len(sys.argv) != 3:
        die("usage: set-plugin-version.py FILE MAJOR.MINOR.MICRO")
    path, release = sys.argv[1], sys.argv[2]
    parts = release.split(".")
    if len(parts) != 3 or not all(p.isdigit() and int(p) < 256 for p in parts):
        die("release '%s': expected MAJOR.MINOR.MICRO, each below 256, such as 22.05.8" % release)
    number = (int(parts[0]) << 16) | (int(parts[1]) << 8) | int(parts[2])
    with open(path, "rb") as f:
        elf = bytearray(f.read())
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        die("%s: not a 64-bit little-endian ELF file" % path)
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    # Section: name, type, flags, addr, offset, size, link, info, addralign, entsize.
    for sec in sections:
        if sec[1] != 11:  # SHT_DYNSYM: the exported symbols, which Slurm's dlsym sees
            continue
        strtab = sections[sec[6]]
        for off in range(sec[4], sec[4] + sec[5], 24):
            name_off, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", elf, off)
            start = strtab[4] + name_off
            name = bytes(elf[start:elf.index(b"\0", start)])
            if name != b"plugin_version":
                continue
            if size != 4 or shndx == 0 or shndx >= len(sections):
                die("%s: plugin_version is not a defined 4-byte symbol" % path)
            home = sections[shndx]
            at = home[4] + (value - home[3])
            old, = struct.unpack_from("<I", elf, at)
            struct.pack_into("<I", elf, at, number)
            with open(path, "wb") as f:
                f.write(elf)
            print("%s: plugin_version %d.%02d.%d -> %s" % (path, old >> 16, (old >> 8) & 255, old & 255, release))
            return
    die("%s: exports no plugin_version (not a Slurm plugin)" % path)


main()
