/* Readiness for a service manager: the sd_notify(3) protocol of systemd,
 * one datagram of "KEY=VALUE" lines sent to the Unix socket named by
 * $NOTIFY_SOCKET (a path, or an abstract name when it starts with '@').
 * It is a stable interface of systemd, spoken here without libsystemd. */
#ifndef CRUN_RENDEZVOUS_NOTIFY_H
#define CRUN_RENDEZVOUS_NOTIFY_H

/* Sends state (for instance "READY=1") to $NOTIFY_SOCKET. 0 when sent or
 * when $NOTIFY_SOCKET is unset or empty (no service manager is listening);
 * -EINVAL when it names no usable socket address; else the send's
 * negative errno. Blocks at most as long as one sendmsg(2) on a datagram
 * socket; never reads. */
int crun__notify(const char *state);

#endif
