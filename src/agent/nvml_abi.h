/* The part of NVML's C interface that crun calls, declared here so that
 * crun builds without NVIDIA's headers and loads the library at run time
 * (nvml.h in this tree's agent/ is crun's own loader, not NVIDIA's).
 *
 * Every type, constant and prototype below matches nvml.h of NVML 12.2
 * (cuda-nvml-dev 12.2.140, as NVIDIA/go-nvml's gen/nvml/nvml.h carries
 * it): the functions are the versioned symbols that nvml.h's unversioned
 * names stand for (nvmlInit -> nvmlInit_v2, nvmlDeviceGetCount ->
 * nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex -> _v2,
 * nvmlEventSetWait -> _v2, nvmlDeviceGetComputeRunningProcesses -> _v3).
 * Only what crun uses is here; tests/nvml_fake.c implements the same. */
#ifndef CRUN_AGENT_NVML_ABI_H
#define CRUN_AGENT_NVML_ABI_H

typedef enum nvmlReturn_enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_INSUFFICIENT_POWER = 8,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96

typedef struct nvmlUtilization_st {
	unsigned int gpu;    /* percent of time a kernel ran, last sample period */
	unsigned int memory; /* percent of time memory was read or written */
} nvmlUtilization_t;

/* nvmlDeviceGetMemoryInfo's (v1) struct: bytes. */
typedef struct nvmlMemory_st {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

/* nvmlDeviceGetComputeRunningProcesses_v3's entries. */
typedef struct nvmlProcessInfo_v2_st {
	unsigned int pid;
	unsigned long long usedGpuMemory; /* bytes */
	unsigned int gpuInstanceId;	  /* MIG; else 0xFFFFFFFF */
	unsigned int computeInstanceId;	  /* MIG; else 0xFFFFFFFF */
} nvmlProcessInfo_t;

typedef enum nvmlTemperatureSensors_enum {
	NVML_TEMPERATURE_GPU = 0,
} nvmlTemperatureSensors_t;

typedef enum nvmlMemoryErrorType_enum {
	NVML_MEMORY_ERROR_TYPE_CORRECTED = 0,
	NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1,
} nvmlMemoryErrorType_t;

typedef enum nvmlEccCounterType_enum {
	NVML_VOLATILE_ECC = 0, /* since the driver loaded */
	NVML_AGGREGATE_ECC = 1,
} nvmlEccCounterType_t;

#define nvmlEventTypeXidCriticalError 0x0000000000000008LL

typedef struct nvmlEventData_st {
	nvmlDevice_t device;
	unsigned long long eventType;
	unsigned long long eventData; /* the XID (999: unknown) */
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlEventData_t;

/* The functions, as nvml.h declares them (crun never links them: nvml.c
 * looks them up with dlsym; tests/nvml_fake.c defines them). */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
				      unsigned int *temp);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power);
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
					 nvmlEccCounterType_t counterType,
					 unsigned long long *eccCounts);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
						     nvmlProcessInfo_t *infos);
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
				      nvmlEventSet_t set);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms);

/* The same, as pointer types for dlsym(). */
typedef nvmlReturn_t (*nvmlInit_v2_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char *(*nvmlErrorString_fn)(nvmlReturn_t result);
typedef nvmlReturn_t (*nvmlDeviceGetCount_v2_fn)(unsigned int *deviceCount);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_v2_fn)(unsigned int index, nvmlDevice_t *device);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByUUID_fn)(const char *uuid, nvmlDevice_t *device);
typedef nvmlReturn_t (*nvmlDeviceGetUUID_fn)(nvmlDevice_t device, char *uuid, unsigned int length);
typedef nvmlReturn_t (*nvmlDeviceGetName_fn)(nvmlDevice_t device, char *name, unsigned int length);
typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_fn)(nvmlDevice_t device,
							 nvmlUtilization_t *utilization);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t device, nvmlMemory_t *memory);
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_fn)(nvmlDevice_t device,
						    nvmlTemperatureSensors_t sensorType,
						    unsigned int *temp);
/* milliwatts */
typedef nvmlReturn_t (*nvmlDeviceGetPowerUsage_fn)(nvmlDevice_t device, unsigned int *power);
typedef nvmlReturn_t (*nvmlDeviceGetTotalEccErrors_fn)(nvmlDevice_t device,
						       nvmlMemoryErrorType_t errorType,
						       nvmlEccCounterType_t counterType,
						       unsigned long long *eccCounts);
typedef nvmlReturn_t (*nvmlDeviceGetComputeRunningProcesses_v3_fn)(nvmlDevice_t device,
								   unsigned int *infoCount,
								   nvmlProcessInfo_t *infos);
typedef nvmlReturn_t (*nvmlEventSetCreate_fn)(nvmlEventSet_t *set);
typedef nvmlReturn_t (*nvmlEventSetFree_fn)(nvmlEventSet_t set);
typedef nvmlReturn_t (*nvmlDeviceRegisterEvents_fn)(nvmlDevice_t device,
						    unsigned long long eventTypes,
						    nvmlEventSet_t set);
typedef nvmlReturn_t (*nvmlEventSetWait_v2_fn)(nvmlEventSet_t set, nvmlEventData_t *data,
					       unsigned int timeoutms);

#endif
