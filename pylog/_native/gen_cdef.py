"""Regenerates plg.cdef from plg.h (run after editing the header).

Constants become `#define NAME ...` so the header stays their only source;
structs get a trailing `...;` so the compiler decides their layout.
"""
import pathlib
import re

here = pathlib.Path(__file__).resolve().parent
h = (here / "plg.h").read_text()
out = ["/* cffi declarations, generated from plg.h by gen_cdef.py; values come from the header. */"]
for m in re.finditer(r"^#define (PLG_[A-Z0-9_]+) ", h, re.M):
    if m.group(1) not in ("PLG_H", "PLG_VERSION"):
        out.append(f"#define {m.group(1)} ...")
body = h[h.index("/* ---- info about one batch"):].replace("#endif /* PLG_H */", "")
body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
body = re.sub(r"[ \t]+\n", "\n", body)
body = re.sub(r"\n\s*\n+", "\n", body)
body = re.sub(r"\n(\} plg_[a-z_]+_t;)", r"\n    ...;\n\1", body)
out.append(body)
(here / "plg.cdef").write_text("\n".join(out))
