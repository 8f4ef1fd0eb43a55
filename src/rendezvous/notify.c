/* sd_notify(3) without libsystemd: the protocol is one datagram, and
 * systemd documents it as stable, so the daemon needs no extra library to
 * run as a Type=notify service. */
#include "rendezvous/notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int crun__notify(const char *state)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	socklen_t salen;
	size_t n;
	ssize_t sent;
	int fd, rc = 0;

	if (!path || !*path)
		return 0;
	n = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@')
		sa.sun_path[0] = '\0'; /* an abstract socket */
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '/'));

	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	do
		sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa,
			      salen);
	while (sent < 0 && errno == EINTR);
	if (sent < 0)
		rc = -errno;
	close(fd);
	return rc;
}
