"""Baseboard management controllers: power through Redfish or IPMI (``gpuforge power``).

This is the first slice of bare-metal bring-up: Redfish or IPMI power status/on/off/cycle
with the day-2 rules. Network boot (PXE) and provisioning are not built yet.
"""
