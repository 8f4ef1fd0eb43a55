/* CRUN_EXPORT marks the functions libcrun exports. libcrun is built with
 * hidden visibility, so a function reaches its users only when a header in
 * this directory declares it with CRUN_EXPORT; everything else in the
 * library stays internal to it. */
#ifndef CRUN_EXPORT_H
#define CRUN_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define CRUN_EXPORT __attribute__((visibility("default")))
#else
#define CRUN_EXPORT
#endif

#endif
