//! # pagestream-glommio
//!
//! A [`pagestream`] engine on glommio DMA files (work in progress).
