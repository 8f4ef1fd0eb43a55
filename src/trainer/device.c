/* The table of the devices this build has (crun-train's choice of
 * train.device). */
#include "trainer/device.h"
#ifdef CRUN_HAVE_CUDA
#include "trainer/cuda/parallel.h"
#endif

#include <string.h>

static const struct crun__device_ops *const devices[] = {
	&crun__device_cpu_ops,
#ifdef CRUN_HAVE_CUDA
	&crun__device_cuda_ops,
#endif
};

const struct crun__device_ops *crun__device_find(const char *name)
{
	for (size_t i = 0; i < sizeof(devices) / sizeof(devices[0]); i++)
		if (!strcmp(devices[i]->name, name))
			return devices[i];
	return NULL;
}
