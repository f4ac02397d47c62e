"""Baseboard management controllers: power through Redfish or IPMI (``gpuforge power``).

The first slices of bare-metal bring-up: Redfish or IPMI power status/on/off/cycle with the
day-2 rules, and the boot override (``bootdev``: a one-time PXE boot). The network boot service
(DHCP/TFTP) and provisioning are not built yet.
"""
