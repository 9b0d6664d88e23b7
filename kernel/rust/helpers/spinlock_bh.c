// SPDX-License-Identifier: GPL-2.0

#include <linux/spinlock.h>

void rust_helper_spin_lock_bh(spinlock_t *lock)
{
	spin_lock_bh(lock);
}

void rust_helper_spin_unlock_bh(spinlock_t *lock)
{
	spin_unlock_bh(lock);
}
