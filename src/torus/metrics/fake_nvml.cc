// A stand-in for libnvidia-ml.so.1 for tests: two GPUs with fixed readings; GPU 1 has no power sensor.
// Thread-safety: stateless apart from an init counter; tests use it from one thread.
extern "C" {

struct FakeDevice {
  unsigned int index;
};
static FakeDevice devices[2] = {{0}, {1}};
static int initialised = 0;

struct FakeUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct FakeMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

int nvmlInit_v2() {
  ++initialised;
  return 0;
}
int nvmlShutdown() {
  --initialised;
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (initialised <= 0) return 1;  // NVML_ERROR_UNINITIALIZED
  *count = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, FakeDevice** device) {
  if (index >= 2) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *device = &devices[index];
  return 0;
}
int nvmlDeviceGetUtilizationRates(FakeDevice* device, FakeUtilization* utilization) {
  utilization->gpu = 40 + device->index;
  utilization->memory = 10;
  return 0;
}
int nvmlDeviceGetMemoryInfo(FakeDevice* device, FakeMemory* memory) {
  memory->total = 16ull << 30;
  memory->used = (device->index + 1ull) << 30;
  memory->free = memory->total - memory->used;
  return 0;
}
int nvmlDeviceGetPowerUsage(FakeDevice* device, unsigned int* milliwatts) {
  if (device->index == 1) return 3;  // NVML_ERROR_NOT_SUPPORTED
  *milliwatts = 72500;
  return 0;
}
int nvmlDeviceGetTemperature(FakeDevice* device, int sensor, unsigned int* celsius) {
  *celsius = 60 + device->index;
  return 0;
}
}
