package numa

const (
	sysMbind        = 235
	sysGetMempolicy = 236
	sysSetMempolicy = 237
	sysMovePages    = 239
	sysGetcpu       = 168
)
