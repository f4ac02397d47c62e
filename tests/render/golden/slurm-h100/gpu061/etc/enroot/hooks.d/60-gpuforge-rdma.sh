#! /bin/bash
# Managed by gpuforge: edit the cluster spec, not this file.
# RDMA devices in enroot (and pyxis) containers. enroot's 10-devices.sh leaves /dev with a minimal
# set when ENROOT_RESTRICT_DEV is set (gpuforge sets it); this hook runs after it (hooks run in
# name order) and binds /dev/infiniband back. A container that sets MELLANOX_VISIBLE_DEVICES gets
# enroot's own 99-mellanox.sh instead (mlx4/mlx5 devices by index), so this hook stands aside.
set -eu
if [ "${MELLANOX_VISIBLE_DEVICES:-void}" != "void" ] || [ ! -d /dev/infiniband ]; then
    exit 0
fi
enroot-mount --root "${ENROOT_ROOTFS}" - <<< "/dev/infiniband /dev/infiniband none x-create=dir,rbind,rw,nosuid,noexec,private"
