/* The store-loss rule and the meaning of a RESUME's answer (store_loss.h). */
#include "agent/store_loss.h"
#include "rendezvous/rdzv.h"
#include "rendezvous/wire.h"

#include <errno.h>

/* A connection that ended by a close, a reset or a broken pipe: the store
 * (or the path to it) went away at once, not by silence. */
static bool closed(int err)
{
	return err == -ECONNRESET || err == -EPIPE || err == -ECONNABORTED;
}

enum crun__store_loss crun__store_loss_classify(const struct crun__store_loss_facts *f)
{
	if (!closed(f->err) || f->hosting)
		return CRUN__LOSS_REJOIN;
	if (f->store_flags & CRUN_WIRE_F_EMBEDDED)
		return CRUN__LOSS_GONE;
	if (!(f->store_flags & CRUN_WIRE_F_RDZV_RESUME) || !f->member || f->nnodes < 1 ||
	    f->nnodes > CRUN_RDZV_RESUME_MAX_NODES)
		return CRUN__LOSS_REJOIN;
	return CRUN__LOSS_RESUME;
}

enum crun__resume_outcome crun__resume_outcome(int status, uint8_t reply_type, int64_t round,
					       int64_t held)
{
	if (status == -ECANCELED)
		return CRUN__RESUME_ROUND_OVER;
	if (status == -ESHUTDOWN)
		return CRUN__RESUME_CLOSED;
	if (status == 0 && reply_type == CRUN_WIRE_VALUES && round == held)
		return CRUN__RESUME_SAME_ROUND;
	return CRUN__RESUME_REFUSED;
}
