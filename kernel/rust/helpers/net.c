// SPDX-License-Identifier: GPL-2.0

#include <linux/icmpv6.h>
#include <linux/inetdevice.h>
#include <linux/netdevice.h>
#include <linux/sched/signal.h>
#include <linux/skbuff.h>
#include <net/dst.h>
#include <net/icmp.h>

const char *rust_helper_dev_name(const struct device *dev)
{
	return dev_name(dev);
}

void *rust_helper_netdev_priv(const struct net_device *dev)
{
	return netdev_priv(dev);
}

void rust_helper_netif_start_queue(struct net_device *dev)
{
	netif_start_queue(dev);
}

void rust_helper_netif_stop_queue(struct net_device *dev)
{
	netif_stop_queue(dev);
}

void rust_helper_netif_wake_queue(struct net_device *dev)
{
	netif_wake_queue(dev);
}

void rust_helper_dev_addr_set(struct net_device *dev, const u8 *addr)
{
	dev_addr_set(dev, addr);
}

unsigned int rust_helper_skb_headlen(const struct sk_buff *skb)
{
	return skb_headlen(skb);
}

void rust_helper_dev_kfree_skb_any(struct sk_buff *skb)
{
	dev_kfree_skb_any(skb);
}

/* An inline function when the kernel has no tracepoints. */
void rust_helper_consume_skb(struct sk_buff *skb)
{
	consume_skb(skb);
}

int rust_helper_skb_cloned(const struct sk_buff *skb)
{
	return skb_cloned(skb);
}

int rust_helper_skb_cow(struct sk_buff *skb, unsigned int headroom)
{
	return skb_cow(skb, headroom);
}

int rust_helper_skb_cow_head(struct sk_buff *skb, unsigned int headroom)
{
	return skb_cow_head(skb, headroom);
}

void rust_helper_dev_hold(struct net_device *dev)
{
	dev_hold(dev);
}

void rust_helper_dev_put(struct net_device *dev)
{
	dev_put(dev);
}

void rust_helper_netif_napi_del(struct napi_struct *napi)
{
	netif_napi_del(napi);
}

void rust_helper_skb_add_rx_frag(struct sk_buff *skb, int i, struct page *page,
				 int off, int size, unsigned int truesize)
{
	skb_add_rx_frag(skb, i, page, off, size, truesize);
}

int rust_helper_restart_syscall(void)
{
	return restart_syscall();
}

void rust_helper_icmp_ndo_send(struct sk_buff *skb_in, int type, int code, __be32 info)
{
	icmp_ndo_send(skb_in, type, code, info);
}

#if IS_ENABLED(CONFIG_IPV6)
void rust_helper_icmpv6_ndo_send(struct sk_buff *skb_in, u8 type, u8 code, __u32 info)
{
	icmpv6_ndo_send(skb_in, type, code, info);
}
#endif

void rust_helper_skb_dst_update_pmtu_no_confirm(struct sk_buff *skb, u32 mtu)
{
	skb_dst_update_pmtu_no_confirm(skb, mtu);
}

void rust_helper_netif_keep_dst(struct net_device *dev)
{
	netif_keep_dst(dev);
}

unsigned int rust_helper_skb_frag_off(const skb_frag_t *frag)
{
	return skb_frag_off(frag);
}

unsigned int rust_helper_skb_frag_size(const skb_frag_t *frag)
{
	return skb_frag_size(frag);
}

int rust_helper_skb_linearize(struct sk_buff *skb)
{
	return skb_linearize(skb);
}

bool rust_helper_netdev_is_registered(const struct net_device *dev)
{
	return dev->reg_state == NETREG_REGISTERED;
}

struct net *rust_helper_dev_net(const struct net_device *dev)
{
	return dev_net(dev);
}

struct in_device *rust_helper_in_dev_get(const struct net_device *dev)
{
	return in_dev_get(dev);
}

void rust_helper_in_dev_put(struct in_device *idev)
{
	in_dev_put(idev);
}

bool rust_helper_netif_is_l3_master(const struct net_device *dev)
{
	return netif_is_l3_master(dev);
}
